// SPDX-License-Identifier: Apache-2.0
#include "core/flush/meta_journal.h"

#include <memory>

#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/index/index.h"
#include "core/util/seq_counter.h"

namespace kvfs {

void MetaJournal::attach(Flusher* flusher) {
  flusher_ = flusher;
  if (!unlogged_.empty()) flusher_->add_meta(std::move(unlogged_));
  unlogged_.clear();
}

void MetaJournal::add_unlogged(std::vector<RecordEntry> entries) {
  if (flusher_)
    flusher_->add_meta(std::move(entries));
  else
    unlogged_.insert(unlogged_.end(), entries.begin(), entries.end());
}

Status MetaJournal::journal(const std::vector<Put>& puts, const std::vector<Inode*>& deletes,
                            uint64_t next_ino) {
  if (read_only_) return Status::ReadOnly();
  if (!index_) return Status::IOError("index unavailable");
  std::vector<InodeSnapshot> snaps;
  snaps.reserve(puts.size());
  for (const Put& p : puts) {
    if (p.in->committed) {
      // A renamed file: its committed content under its new name.
      snaps.push_back(*p.in->committed);
      snaps.back().parent = p.parent;
      snaps.back().name = std::string(p.name);
    } else {
      std::lock_guard g(p.in->mu);
      snaps.push_back(FileData::snapshot_locked(*p.in, p.parent, p.name));
    }
    snaps.back().seq = seqs_->take();
  }
  IndexBatch b;
  for (auto& s : snaps) b.puts.push_back(&s);
  std::vector<RecordEntry> entries;
  entries.reserve(deletes.size() + snaps.size());
  for (Inode* d : deletes) {
    RecordEntry e;
    e.kind = EntryKind::kTombstone;
    e.snap.ino = d->ino;
    e.snap.seq = seqs_->take();
    b.deletes.push_back({d->ino, e.snap.seq});
    entries.push_back(std::move(e));
  }
  for (auto& s : snaps) entries.push_back({EntryKind::kSnapshot, s});
  // Committed here first, in a segment shortly after: until then the P keys
  // keep them (index.h), so that a crash in between cannot lose them for a
  // later rebuild.
  for (const RecordEntry& e : entries) b.pending.push_back(&e);
  b.next_ino = next_ino;
  b.next_seq = seqs_->next();
  KVFS_RETURN_IF_ERROR(index_->commit(b, false));
  for (size_t i = 0; i < puts.size(); ++i)
    puts[i].in->committed = std::make_unique<InodeSnapshot>(std::move(snaps[i]));
  for (Inode* d : deletes) d->committed.reset();
  add_unlogged(std::move(entries));
  return Status::OK();
}

Status MetaJournal::journal_peer_unlink(const PeerOrigin& origin, int64_t mtime_ns) {
  if (read_only_) return Status::ReadOnly();
  if (!index_) return Status::IOError("index unavailable");
  RecordEntry e;
  e.kind = EntryKind::kPeerUnlink;
  e.snap.name = origin.node;
  e.snap.ino = origin.ino;
  e.snap.mtime_ns = mtime_ns;
  e.snap.seq = seqs_->take();
  IndexBatch b;
  b.pending.push_back(&e);
  b.peer_unlinks.push_back(&e);
  b.next_seq = seqs_->next();
  KVFS_RETURN_IF_ERROR(index_->commit(b, false));
  add_unlogged({std::move(e)});
  return Status::OK();
}

}  // namespace kvfs
