# SPDX-License-Identifier: Apache-2.0
"""Out-of-tree vLLM offloading spec for the CPU platform.

TieringOffloadingSpec (CPU primary tier + secondary tiers such as "fs")
works on CPU except for its worker: CPUOffloadingWorker asserts CUDA/XPU
device tensors and uses device streams/events.  On the CPU platform the
"device" KV cache is ordinary host memory, so a store/load is a plain
memcpy between the KV cache rows and the shared offload region.

This module keeps vLLM's own descriptor computation (the direct-layout
_fill_direct_ops of SingleDirectionOffloadingHandler) and replaces only the
device-copy part with synchronous ctypes.memmove.  The connector submits
stores at the start of the next engine step (after the CPU forward pass has
finished writing the KV), and loads before the forward pass, so a synchronous
copy is correctly ordered.

Use with:
  --kv-transfer-config '{"kv_connector":"OffloadingConnector",
     "kv_role":"kv_both","kv_connector_extra_config":{
       "spec_name":"CpuTieringOffloadingSpec",
       "spec_module_path":"kvfs_cpu_offload",
       "cpu_bytes_to_use":..., "secondary_tiers":[{"type":"fs","root_dir":MNT}]}}'
(with this directory on PYTHONPATH).

KVFS_CPU_SPEC_ZERO_LOADS=1 zeroes every block the worker loads: a negative
control showing that a wrong KV changes the server's output.
"""

import ctypes
import os
import time

import numpy as np
import torch

from vllm.logger import init_logger
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.gpu_worker import SingleDirectionOffloadingHandler
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

logger = init_logger(__name__)

_memmove = ctypes.memmove


class CpuMemcpyHandler(SingleDirectionOffloadingHandler):
    """One direction (KV cache -> region, or region -> KV cache) on CPU."""

    def __init__(self, kv_tensors, region_tensors, blocks_per_chunk,
                 layer_refs_per_group, kv_to_region: bool):
        # Deliberately not calling super().__init__ (it asserts CUDA/XPU and
        # allocates streams/events); set only what _fill_direct_ops needs.
        assert len(kv_tensors) == len(region_tensors) > 0
        for kv, reg in zip(kv_tensors, region_tensors):
            assert kv.dtype == torch.int8 and kv.ndim == 2 and kv.device.type == "cpu"
            assert reg.dtype == torch.int8 and reg.ndim == 2
            assert reg.shape[1] == kv.shape[1] * blocks_per_chunk
        self.gpu_to_cpu = kv_to_region
        self.src_tensors = kv_tensors if kv_to_region else region_tensors
        self.dst_tensors = region_tensors if kv_to_region else kv_tensors
        self.layer_refs_per_group = layer_refs_per_group
        self.src_blocks_per_chunk = 1 if kv_to_region else blocks_per_chunk
        self.dst_blocks_per_chunk = blocks_per_chunk if kv_to_region else 1
        self._canonical_copy_plans = None
        self._fill_group_ops = self._fill_direct_ops
        self._finished: list[TransferResult] = []
        self.num_jobs = 0
        # Negative control for tests: zero every loaded block.
        self._corrupt = (not kv_to_region
                         and os.environ.get("KVFS_CPU_SPEC_ZERO_LOADS") == "1")
        self.num_bytes = 0

    def transfer_async(self, job_id: int, src_spec: LoadStoreSpec,
                       dst_spec: LoadStoreSpec) -> bool:
        assert isinstance(src_spec, BlockIDsLoadStoreSpec)
        assert isinstance(dst_spec, BlockIDsLoadStoreSpec)
        t0 = time.perf_counter()
        src_blocks, dst_blocks = src_spec.block_ids, dst_spec.block_ids
        gpu_spec = src_spec if self.gpu_to_cpu else dst_spec
        assert isinstance(gpu_spec, GPULoadStoreSpec)
        group_sizes = gpu_spec.group_sizes
        block_indices = gpu_spec.block_indices
        assert len(group_sizes) == len(self.layer_refs_per_group)
        n_ops = self._estimate_max_copy_ops(group_sizes)
        all_src = np.empty(n_ops, dtype=np.int64)
        all_dst = np.empty(n_ops, dtype=np.int64)
        all_sizes = np.empty(n_ops, dtype=np.int64)
        src_off = dst_off = op_idx = nbytes = 0
        for g_idx, (gsize, bidx) in enumerate(zip(group_sizes, block_indices)):
            if gsize == 0:
                continue
            s_skip = bidx % self.src_blocks_per_chunk
            d_skip = bidx % self.dst_blocks_per_chunk
            s_cnt = cdiv(gsize + s_skip, self.src_blocks_per_chunk)
            d_cnt = cdiv(gsize + d_skip, self.dst_blocks_per_chunk)
            op_idx, gbytes = self._fill_group_ops(
                g_idx,
                group_src=src_blocks[src_off:src_off + s_cnt],
                group_dst=dst_blocks[dst_off:dst_off + d_cnt],
                group_size=gsize,
                src_skip_count=s_skip,
                dst_skip_count=d_skip,
                all_src=all_src, all_dst=all_dst, all_sizes=all_sizes,
                op_idx=op_idx,
            )
            nbytes += gbytes
            src_off += s_cnt
            dst_off += d_cnt
        assert src_off == len(src_blocks) and dst_off == len(dst_blocks)
        for s, d, n in zip(all_src[:op_idx].tolist(), all_dst[:op_idx].tolist(),
                           all_sizes[:op_idx].tolist()):
            _memmove(d, s, n)
            if self._corrupt:
                ctypes.memset(d, 0, n)
        self.num_jobs += 1
        self.num_bytes += nbytes
        self._finished.append(TransferResult(
            job_id=job_id, success=True, transfer_size=nbytes,
            transfer_time=time.perf_counter() - t0))
        return True

    def get_finished(self) -> list[TransferResult]:
        out, self._finished = self._finished, []
        return out

    def wait(self, job_ids: set[int]) -> None:  # copies are synchronous
        return None

    def shutdown(self) -> None:
        self._finished.clear()
        self.src_tensors = []
        self.dst_tensors = []


class CpuMemcpyOffloadingWorker(OffloadingWorker):
    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int,
                 mmap_region: SharedOffloadRegion):
        self._mmap_region = mmap_region
        kv_tensors, region_tensors = [], []
        for t in kv_caches.tensors:
            page = t.page_size_bytes
            kv = t.tensor.view(torch.int8).view((-1, page))
            assert kv.device.type == "cpu", kv.device
            kv_tensors.append(kv)
            region_tensors.append(
                mmap_region.create_next_worker_view(page * blocks_per_chunk))
        logger.info("CpuMemcpyOffloadingWorker: %d KV tensors, %d blocks/chunk",
                    len(kv_tensors), blocks_per_chunk)
        refs = kv_caches.group_data_refs
        self._store = CpuMemcpyHandler(kv_tensors, region_tensors,
                                       blocks_per_chunk, refs, True)
        self._load = CpuMemcpyHandler(kv_tensors, region_tensors,
                                      blocks_per_chunk, refs, False)

    def submit_store(self, job_id, src_spec, dst_spec) -> bool:
        return self._store.transfer_async(job_id, src_spec, dst_spec)

    def submit_load(self, job_id, src_spec, dst_spec) -> bool:
        return self._load.transfer_async(job_id, src_spec, dst_spec)

    def get_finished(self) -> list[TransferResult]:
        return self._store.get_finished() + self._load.get_finished()

    def wait(self, job_ids: set[int]) -> None:
        return None

    def shutdown(self) -> None:
        logger.info("CpuMemcpyOffloadingWorker: stores=%d (%d B) loads=%d (%d B)",
                    self._store.num_jobs, self._store.num_bytes,
                    self._load.num_jobs, self._load.num_bytes)
        self._store.shutdown()
        self._load.shutdown()
        if self._mmap_region is not None:
            self._mmap_region.cleanup()
            self._mmap_region = None


class CpuTieringOffloadingSpec(TieringOffloadingSpec):
    """TieringOffloadingSpec whose worker does KV<->region copies on CPU."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if not self._worker:
            self._worker = self.create_worker(kv_caches)
        return self._worker

    def create_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self.config.canonical_layout:
            raise ValueError("canonical_layout is not supported by the CPU worker")
        rank = 0 if self.replicated_layout else self.config.parallel.rank
        region = SharedOffloadRegion(
            engine_id=self._engine_id,
            num_chunks=self.num_chunks,
            rank=rank,
            kv_bytes_per_chunk=self.kv_bytes_per_chunk,
            cpu_page_size=self.cpu_page_size_per_worker,
        )
        try:
            return CpuMemcpyOffloadingWorker(kv_caches, self.blocks_per_chunk, region)
        except Exception:
            region.cleanup()
            raise
