// SPDX-License-Identifier: Apache-2.0
// Flusher, the threads' side: taking a batch, capturing, writing records,
// committing to the index, failing and retrying. The callers' side (queues,
// flush_all) is in flusher_queue.cc.
#include "core/flush/flusher.h"

#include <algorithm>
#include <chrono>

#include "core/backing/backing_io.h"
#include "core/data/file_data.h"
#include "core/index/index.h"
#include "core/namespace/namespace.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/seq_counter.h"

namespace kvfs {

struct Flusher::Captured {
  InodeRef in;
  bool blocks_only = false;  // pressure write-out, no commit
  bool sync = false;         // an fsync waits for it
  bool reclaim = false;      // a copy-forward: its room was granted by the evictor
  uint64_t version = 0;      // made durable by the commit; 0 for blocks only
  uint64_t trunc_gen = 0;
  InodeSnapshot snap;  // extents of clean blocks; dirty ones are added when written
  struct Dirty {
    uint32_t idx;
    BufRef buf;
    uint32_t len;
    Extent ext;
  };
  std::vector<Dirty> dirty;
  uint64_t bytes = 0;
};

namespace {
LogLimiter g_flush_err_log;
constexpr auto kRetryDelay = std::chrono::seconds(1);
constexpr auto kRetrySlice = std::chrono::milliseconds(100);
// A flusher with nothing to write for this long closes (seals) its segment:
// an open segment costs each peer an open now and then even when its head
// does not move (peer_log.h), a sealed one nothing. A writer busy more
// often keeps its segment: a bursty node starts at most one segment per
// flusher per kIdleSeal on top of those it fills. A segment under an
// eighth of segment_size waits kIdleSealSmall instead, so that a trickle
// of files (one a minute, say) fills one segment instead of leaving one
// small segment each, which every peer's listing would carry.
constexpr auto kIdleSeal = std::chrono::seconds(30);
constexpr auto kIdleSealSmall = std::chrono::minutes(10);
}  // namespace

Flusher::Flusher(const Parts& parts)
    : p_(parts),
      pacer_(FlushPacer::Parts{parts.clock, parts.reads, parts.ram, parts.cfg->flush_threads,
                               parts.cfg->flush_pacing}) {}

Flusher::~Flusher() {
  (void)stop();
}

void Flusher::start() {
  for (unsigned i = 0; i < p_.cfg->flush_threads; ++i) {
    auto w = std::make_unique<Worker>();
    Worker* raw = w.get();
    workers_.push_back(std::move(w));
    raw->thread = std::thread([this, raw] { run(raw); });
  }
}

Status Flusher::stop() {
  if (workers_.empty()) return Status::OK();
  Status st = flush_all(/*include_open=*/true);
  {
    std::lock_guard l(q_mu_);
    stopping_ = true;
    retry_.clear();
    refused_.clear();
    queue_.clear();
  }
  q_cv_.notify_all();
  pacer_.stop();
  if (st.code() == Status::Code::kTimedOut) {
    // A worker stuck in a backing call can be neither joined nor destroyed
    // (its segment's close would block too): the threads are left to the
    // process exit, which the caller does next (fs/main.cc).
    abandoned_ = true;
    for (auto& w : workers_) w->thread.detach();
    for (auto& w : workers_) (void)w.release();
    workers_.clear();
    return st;
  }
  for (auto& w : workers_) w->thread.join();
  workers_.clear();
  return st;
}

bool Flusher::capture(const InodeRef& in, bool force, bool from_queue, bool pressure, Captured* c) {
  // The commit lock, not just the tree's: a rename or unlink takes its seq
  // before its journal commit and applies the change after it. A capture in
  // between would take a newer seq for the old name (or a file just
  // unlinked), and a crash before this flush's commit would let the
  // catch-up apply that over the rename.
  std::shared_lock cl(p_.ns->commit_mu());
  std::lock_guard g(in->mu);
  if (from_queue) in->flush.dequeued({});
  if (!in->flush.may_capture_now({})) return false;
  const bool linked = in->linked.load();
  const bool sealed = in->opens.active_writers() == 0 || in->flush.syncing() || force;
  bool blocks_only;
  if (!linked || !sealed) {
    // Not committable now; only a write-out of dirty blocks to free RAM.
    if (!pressure || in->dirty_charge == 0) return false;
    blocks_only = true;
  } else {
    if (!in->dirty()) return false;
    blocks_only = false;
  }
  c->in = in;
  c->blocks_only = blocks_only;
  c->sync = in->flush.syncing();
  c->version = blocks_only ? 0 : in->flush.version();
  c->trunc_gen = in->trunc_gen;
  c->reclaim = in->flush.reclaiming();
  for (uint32_t i = 0; i < in->blocks.size(); ++i) {
    const BlockSlot& s = in->blocks[i];
    if (!s.buf) continue;
    c->dirty.push_back({i, s.buf, s.len, Extent{}});
    c->bytes += s.len;
  }
  if (!blocks_only) {
    c->snap = FileData::snapshot_locked(*in, in->parent, in->name);
    c->snap.seq = p_.seqs->take();
  }
  in->flush.begin({}, !blocks_only);
  return true;
}

bool Flusher::take_batch(std::vector<Captured>* batch, std::vector<RecordEntry>* meta, bool* sync,
                         bool* urgent, bool* awaited, std::chrono::nanoseconds seal_after,
                         bool* idle) {
  std::unique_lock l(q_mu_);
  const bool has_writer = seal_after.count() > 0;
  const int64_t seal_at = p_.clock->mono_ns() + seal_after.count();
  for (;;) {
    if (stopping_) return false;
    const int64_t now = p_.clock->mono_ns();
    if (!retry_.empty() && now >= retry_at_ns_) {
      for (auto& in : retry_) queue_.push_back(std::move(in));
      retry_.clear();
    }
    const bool ready = !queue_.empty() || !ungated_.empty() || !meta_.empty() || pressure_;
    if (ready && now >= retry_at_ns_) break;
    // The back-off is on the clock, which a test may move: it is read again
    // at least every kRetrySlice, and retry_now() ends the wait at once.
    if (ready || !retry_.empty()) {
      q_cv_.wait_for(l, std::min<std::chrono::nanoseconds>(
                            std::chrono::nanoseconds(retry_at_ns_ - now), kRetrySlice));
    } else if (has_writer) {
      if (now >= seal_at) {
        *idle = true;
        return true;
      }
      q_cv_.wait_for(l, std::chrono::nanoseconds(seal_at - now));
    } else {
      q_cv_.wait(l);
    }
  }
  ++active_;
  meta->swap(meta_);
  meta_.clear();
  *awaited = std::any_of(meta->begin(), meta->end(),
                         [&](const RecordEntry& e) { return tracked_.count(e.snap.seq) != 0; });
  const bool pressure = pressure_;
  pressure_ = false;
  const bool force = force_all_;
  // A batch waits for room under the cap as a whole: one near the cap's size
  // could never be granted beside the other flushers' batches and the
  // segments it is to replace (a small cap, much dirty data at once), and
  // would be refused while eviction could make room for a smaller one.
  const uint64_t limit = std::min<uint64_t>(p_.cfg->flush_batch_bytes,
                                            std::max<uint64_t>(1 << 20, p_.budget->capacity() / 4));
  uint64_t bytes = 0;
  std::vector<InodeRef> ungated(ungated_.begin(), ungated_.end());
  ungated_.clear();
  l.unlock();
  for (auto& in : ungated) {
    Captured c;
    if (capture(in, force, false, pressure, &c)) {
      bytes += c.bytes;
      batch->push_back(std::move(c));
    }
  }
  l.lock();
  while (!queue_.empty() && bytes < limit) {
    InodeRef in = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    Captured c;
    if (capture(in, force, true, pressure, &c)) {
      bytes += c.bytes;
      batch->push_back(std::move(c));
    }
    l.lock();
  }
  if (pressure && bytes < limit) {
    std::vector<InodeRef> open(writing_.begin(), writing_.end());
    l.unlock();
    for (auto& in : open) {
      if (bytes >= limit) break;
      Captured c;
      if (capture(in, false, false, true, &c)) {
        bytes += c.bytes;
        batch->push_back(std::move(c));
      }
    }
    l.lock();
  }
  *sync = sync_all_;  // flush_all (fsync of a dir, unmount) also syncs the WAL
  for (auto& c : *batch) *sync |= c.sync;
  *urgent = *sync || pressure || force;
  return true;
}

void Flusher::run(Worker* w) {
  for (;;) {
    std::vector<Captured> batch;
    std::vector<RecordEntry> meta;
    bool sync = false, urgent = false, awaited = false, idle = false;
    std::chrono::nanoseconds seal_after{0};
    if (w->writer)
      seal_after = w->writer->size() >= p_.cfg->segment_size / 8 ? kIdleSeal : kIdleSealSmall;
    if (!take_batch(&batch, &meta, &sync, &urgent, &awaited, seal_after, &idle)) break;
    if (idle) {
      w->writer.reset();  // sealed (segment_writer.cc); the next batch starts a new one
      continue;
    }
    // Metadata first, and with the evictor's copies never gated (the
    // protocol in space_budget.h).
    std::vector<Captured> copies, data;
    for (auto& c : batch)
      if (!c.dirty.empty()) (c.reclaim ? copies : data).push_back(std::move(c));
    std::erase_if(batch, [](const Captured& c) { return !c.in; });
    std::vector<RecordEntry> none, data_meta;
    if (!awaited && !data.empty() && p_.budget->roomy(room_for(data))) {
      // Nobody waits for these entries (the index holds them already), and
      // the data gets its room at once: they ride with it, under its one
      // fdatasync. Apart, the vLLM pattern's renames and mkdirs made more
      // than half of the fdatasyncs, each a cache flush of the backing
      // server's disk that stalls every flusher. Near the cap they go apart
      // (the protocol, 4).
      for (auto& c : batch) data.push_back(std::move(c));
      batch.clear();
      data_meta.swap(meta);
    }
    for (auto* part : {&batch, &copies, &data}) {
      std::vector<RecordEntry>& m = part == &batch ? meta : part == &data ? data_meta : none;
      if (part->empty() && m.empty()) continue;
      LogPos pos;
      // Only client data is paced: metadata and the evictor's copies are
      // small or wanted by a wait for room, which must never wait on it.
      FlushPacer::Slot slot(&pacer_);
      FlushPacer::Slot* paced = part == &data ? &slot : nullptr;
      Status st = write_batch(w, *part, m, /*gate=*/part == &data, &pos, paced, urgent);
      // The backing filesystem filled up before the cap: evict below what
      // is used, then try again in a fresh segment, as long as the passes
      // free something (the other flushers may take what they free). Only
      // client data waits (the protocol, 1): the rest fails at once and is
      // retried.
      for (int tries = 0; st.code() == Status::Code::kNoSpace && part == &data && tries < 8;
           ++tries) {
        drop_failed_writer(w, pos);
        SpaceBudget::RoomWait wait;
        p_.budget->ask_backing_room(&wait);
        if (!await_room(w, wait).ok()) break;
        st = write_batch(w, *part, m, true, &pos, paced, urgent);
      }
      if (st.ok()) {
        finish_batch(*part, m, pos, sync);
        slot.release(true);
        seal_if_full(w);
      } else {
        // A failed segment is never appended to again; one refused room is
        // closed too (the protocol, 5).
        drop_failed_writer(w, pos);
        fail_batch(*part, m, st);
      }
    }
    {
      std::lock_guard l(q_mu_);
      --active_;
    }
    idle_cv_.notify_all();
  }
  w->writer.reset();
}

Status Flusher::write_batch(Worker* w, std::vector<Captured>& batch, std::vector<RecordEntry>& meta,
                            bool gate, LogPos* pos, FlushPacer::Slot* slot, bool urgent) {
  // Data waits for room under the cap (space_budget.h's protocol).
  const uint64_t grant = room_for(batch);
  seal_if_full(w);  // before the wait (the protocol, 5)
  if (gate) {
    SpaceBudget::RoomWait wait;
    p_.budget->ask_room(grant, &wait);
    KVFS_RETURN_IF_ERROR(await_room(w, wait));
  }
  struct Release {
    SpaceBudget* b;
    uint64_t n;
    ~Release() {
      if (b) b->release(n);
    }
  } release{gate ? p_.budget : nullptr, grant};
  if (slot != nullptr) {
    uint64_t bytes = 0;
    for (auto& c : batch) bytes += c.bytes;
    slot->take(bytes, urgent);
  }
  if (!w->writer) {
    auto nw = p_.segs->new_writer();
    if (!nw.ok()) return nw.status();
    w->writer = std::move(*nw);
  }
  SegmentWriter& sw = *w->writer;
  // Client data gives way to reads inside the batch too, until it is written.
  struct Unpause {
    SegmentWriter* w;
    ~Unpause() {
      if (w) w->set_pause({});
    }
  } unpause{slot != nullptr ? &sw : nullptr};
  if (slot != nullptr)
    sw.set_pause({[slot] { return slot->may_give_way(); }, [slot] { slot->pause_for_reads(); }});
  pos->seg = sw.id();
  pos->start = sw.size();
  std::vector<RecordEntry> entries = meta;  // meta stays intact for a retry
  for (auto& c : batch)
    if (!c.blocks_only && c.dirty.empty()) entries.push_back({EntryKind::kSnapshot, c.snap});
  if (!entries.empty()) KVFS_RETURN_IF_ERROR(sw.append(RecordType::kMeta, entries, {}, nullptr));

  // What each file's record says, kept apart from c.snap until the segment is
  // synced: a retry in a fresh segment starts again from the clean extents,
  // where merging twice would list a block twice (a record no scan accepts).
  std::vector<std::pair<Captured*, std::vector<BlockExtent>>> written;
  for (auto& c : batch) {
    if (c.dirty.empty()) continue;
    std::vector<SegmentWriter::Block> blocks;
    blocks.reserve(c.dirty.size());
    for (auto& d : c.dirty) {
      d.ext.len = d.len;
      d.ext.hash = hash_bytes(d.buf->data(), d.len);
      d.ext.seg = sw.id();
      blocks.push_back({d.buf, d.len});
    }
    std::vector<RecordEntry> fe;
    if (!c.blocks_only) {
      // Merge the dirty blocks into the snapshot's extent list (sorted by idx).
      fe.push_back({EntryKind::kSnapshot, c.snap});
      auto& ex = fe[0].snap.extents;
      for (auto& d : c.dirty) ex.push_back({d.idx, d.ext});
      std::sort(ex.begin(), ex.end(), [](auto& a, auto& b) { return a.idx < b.idx; });
    }
    auto fill = [&](const std::vector<uint64_t>& offs) {
      for (size_t i = 0; i < offs.size(); ++i) c.dirty[i].ext.off = offs[i];
      if (fe.empty()) return;
      size_t j = 0;
      for (auto& be : fe[0].snap.extents)
        if (j < c.dirty.size() && be.idx == c.dirty[j].idx) be.ext = c.dirty[j++].ext;
    };
    KVFS_RETURN_IF_ERROR(
        sw.append(c.blocks_only ? RecordType::kBlocks : RecordType::kFile, fe, blocks, fill));
    if (!fe.empty()) written.emplace_back(&c, std::move(fe[0].snap.extents));
  }
  if (slot != nullptr) {
    KVFS_RETURN_IF_ERROR(sw.drain());
    sw.set_pause({});
    slot->written();
  }
  KVFS_RETURN_IF_ERROR(sw.sync());
  for (auto& [c, extents] : written) c->snap.extents = std::move(extents);
  pos->state = sw.log_state();
  return Status::OK();
}

uint64_t Flusher::room_for(const std::vector<Captured>& batch) const {
  // Records add a page each, one block covers the headers of a batch; the
  // segment may grow by one preallocation step on top.
  uint64_t bytes = kBlockSize + p_.segs->prealloc_step();
  for (auto& c : batch) bytes += c.bytes;
  return bytes;
}

void Flusher::seal_if_full(Worker* w) {
  // Closed as soon as it is full, not at the next batch (the protocol in
  // space_budget.h, 5): an idle flusher's may be all dead space by then.
  if (w->writer && w->writer->size() >= p_.cfg->segment_size) w->writer.reset();
}

void Flusher::write_part(Worker* w, std::vector<Captured>& part, std::vector<RecordEntry>& meta,
                         bool sync) {
  if (part.empty() && meta.empty()) return;
  LogPos pos;
  Status st = write_batch(w, part, meta, /*gate=*/false, &pos);
  if (st.ok()) {
    finish_batch(part, meta, pos, sync);
    seal_if_full(w);
    return;
  }
  drop_failed_writer(w, pos);  // a failed segment is never appended to again
  fail_batch(part, meta, st);
}

void Flusher::drop_failed_writer(Worker* w, const LogPos& pos) {
  if (w->writer && w->writer->id() == pos.seg) w->writer->discard_from(pos.start);
  w->writer.reset();
}

Status Flusher::await_room(Worker* w, SpaceBudget::RoomWait& wait) {
  while (!p_.budget->step(wait)) serve_ungated(w);
  return wait.result();
}

void Flusher::serve_ungated(Worker* w) {
  std::vector<RecordEntry> meta;
  std::vector<InodeRef> ins;
  bool sync;
  {
    std::lock_guard l(q_mu_);
    if (meta_.empty() && ungated_.empty()) return;
    meta.swap(meta_);
    ins.assign(ungated_.begin(), ungated_.end());
    ungated_.clear();
    sync = sync_all_;
  }
  std::vector<Captured> metas, copies;
  for (auto& in : ins) {
    Captured c;
    if (!capture(in, false, false, false, &c)) continue;
    sync |= c.sync;
    if (c.dirty.empty()) {
      metas.push_back(std::move(c));
    } else if (c.reclaim) {
      copies.push_back(std::move(c));
    } else {
      // Client data arrived meanwhile: it waits for room like the rest.
      std::lock_guard g(in->mu);
      in->flush.abandon({});
      enqueue_locked(in, false);
    }
  }
  std::vector<RecordEntry> none;
  write_part(w, metas, meta, sync);
  write_part(w, copies, none, sync);
}

void Flusher::finish_batch(std::vector<Captured>& batch, const std::vector<RecordEntry>& meta,
                           const LogPos& pos, bool sync) {
  if (abandoned_.load()) return;  // see fail_batch
  Status cs;
  std::vector<RecordEntry> tombs;
  {
    // Ordered against the journal's commits (a rename, an unlink) without
    // holding the lock lookups take (namespace.h).
    std::shared_lock cl(p_.ns->commit_mu());
    IndexBatch ib;
    tombs.reserve(batch.size());
    for (auto& c : batch) {
      if (c.blocks_only) continue;
      if (!c.in->linked.load()) {
        // Unlinked after the capture: its snapshot may already sit in the
        // segment, so the segments need a tombstone too (index rebuilds);
        // a P key keeps it until it is written (index.h).
        RecordEntry t;
        t.kind = EntryKind::kTombstone;
        t.snap.ino = c.in->ino;
        t.snap.seq = p_.seqs->take();
        tombs.push_back(std::move(t));
        continue;
      }
      std::lock_guard g(c.in->mu);  // requeue is the inode's; the commit lock is only shared
      if (c.snap.parent != c.in->parent || c.snap.name != c.in->name) {
        // Renamed since the capture (and journaled): keep the current name
        // in the index, and write a fresh snapshot so the segments agree.
        c.snap.parent = c.in->parent;
        c.snap.name = c.in->name;
        c.in->flush.recommit({});
      }
      if (c.in->committed && c.in->committed->seq > c.snap.seq) {
        // The journal committed a newer seq meanwhile (a rename): the index
        // never goes back to an older seq, or a catch-up could apply the
        // journal's record over this newer content.
        c.snap.seq = p_.seqs->take();
        c.in->flush.recommit({});
      }
      ib.puts.push_back(&c.snap);
    }
    for (const RecordEntry& t : tombs) ib.pending.push_back(&t);
    // The appended journal entries are in a segment now: their P keys go.
    for (const RecordEntry& e : meta) ib.logged.push_back(e.snap.seq);
    // The index's position in this segment's log moves on, unless an
    // earlier batch in it failed to commit (a gap: the next mount fills it).
    if (pos.seg != 0 && p_.segs->applied(pos.seg) == pos.start)
      ib.segments.emplace_back(pos.seg, pos.state);
    ib.next_ino = p_.ns->next_ino();
    ib.next_seq = p_.seqs->next();
    if (!ib.empty()) cs = p_.index->commit(ib, sync);
    if (cs.ok() && !ib.segments.empty()) p_.segs->note_applied(pos.seg, pos.state.end);
    if (cs.ok()) {
      for (auto& c : batch) {
        Inode& in = *c.in;
        std::lock_guard g(in.mu);
        if (in.trunc_gen == c.trunc_gen) {
          for (auto& d : c.dirty) p_.data->flushed_locked(in, d.idx, d.ext, d.buf);
        }
        if (!c.blocks_only) {
          if (in.linked.load()) in.committed = std::make_unique<InodeSnapshot>(c.snap);
          flushed_files_.fetch_add(1, std::memory_order_relaxed);
        }
        for (auto& d : c.dirty) flushed_bytes_.fetch_add(d.len, std::memory_order_relaxed);
        const bool again = in.flush.committed({}, c.version, in.linked.load());
        if (again || FileData::ready_to_flush_locked(in)) enqueue_locked(c.in, in.flush.syncing());
        if (FileData::unused_locked(in)) p_.data->free_locked(in);
      }
    }
  }
  if (!tombs.empty()) add_meta(std::move(tombs));
  if (!cs.ok()) {
    // The entries are in the segment (past the gap the catch-up fills) and
    // their P keys stay: nothing to write again.
    std::vector<RecordEntry> none;
    fail_batch(batch, none, cs);
    return;
  }
  if (!meta.empty()) {
    std::lock_guard l(q_mu_);
    bool any = false;
    for (const RecordEntry& e : meta)
      if (tracked_.count(e.snap.seq)) any |= logged_.insert(e.snap.seq).second;
    if (any) meta_cv_.notify_all();
  }
  batches_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard l(q_mu_);
    if (!refused_.empty())
      for (const Captured& c : batch)
        if (!c.blocks_only) refused_.erase(c.in);
  }
  p_.ram->set_flush_error(Status::OK());
  p_.budget->flushed();
  durable_cv_.notify_all();
}

void Flusher::fail_batch(std::vector<Captured>& batch, std::vector<RecordEntry>& meta,
                         const Status& st) {
  if (abandoned_.load()) return;  // the process is exiting under this thread
  const bool full = st.code() == Status::Code::kNoSpace;
  (full || st.code() == Status::Code::kAtCapacity ? enospc_ : io_errors_).fetch_add(1);
  const bool no_room = full || st.code() == Status::Code::kAtCapacity;
  // The backing filesystem itself is full before the cap: evict below what
  // is used now.
  if (full) p_.budget->backing_full();
  uint64_t held = 0;
  if (g_flush_err_log.allow(&held))
    spdlog::error("flush of {} files failed, will retry: {} ({} similar errors not shown)",
                  batch.size(), st.ToString(), held);
  std::vector<InodeRef> again;
  // Writers are refused only once a linked file's data found no room: an
  // unlinked file's data is gone, and metadata and copies forward fail at
  // once on a full disk, before any pass could help.
  std::vector<InodeRef> refused;
  for (auto& c : batch) {
    std::lock_guard g(c.in->mu);
    if (no_room && !c.reclaim && !c.dirty.empty() && c.in->linked.load()) refused.push_back(c.in);
    c.in->flush.failed({}, st);
    if (c.in->linked.load() || c.in->dirty_charge > 0) again.push_back(c.in);
  }
  {
    std::lock_guard l(q_mu_);
    for (auto& in : again) retry_.push_back(std::move(in));
    if (!refused.empty()) {
      refused_.insert(refused.begin(), refused.end());
      p_.budget->refused();
    }
    for (auto& e : meta) meta_.push_back(std::move(e));
    if (!meta.empty()) {
      ++meta_failures_;
      meta_error_ = st;
    }
    retry_at_ns_ = p_.clock->mono_ns() + std::chrono::nanoseconds(kRetryDelay).count();
  }
  if (!meta.empty()) meta_cv_.notify_all();  // log_meta's wait ends
  p_.ram->set_flush_error(st);
  durable_cv_.notify_all();
}

}  // namespace kvfs
