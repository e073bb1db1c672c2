// SPDX-License-Identifier: Apache-2.0
// MetaJournal: the Journal the namespace commits its changes through
// (directories, symlinks and special files when made; renames, unlinks and
// evictions of committed inodes). Each change is committed to the index at
// once, with a P key per entry, and handed to the flushers, which append the
// entries to the segment log and then drop the P keys (index.h). Until the
// flushers exist (at mount) the entries wait here.
//
// Thread-safe as the namespace uses it: journal() runs with
// Namespace::commit_mu_ held exclusively, so calls are serialised; use_index() and attach() run on
// the mount's thread before anything is served.
#pragma once

#include <cstdint>
#include <vector>

#include "core/namespace/namespace.h"
#include "core/records/record.h"

namespace kvfs {

class Flusher;
class IndexWriter;
class SeqCounter;

class MetaJournal : public Journal {
 public:
  MetaJournal(bool read_only, SeqCounter* seqs) : read_only_(read_only), seqs_(seqs) {}

  // The index the mount settled on (it may rebuild it before).
  void use_index(IndexWriter* index) { index_ = index; }
  // From now on entries go to the flushers; those kept so far go first.
  void attach(Flusher* flusher);
  // Entries for the segment log: to the flushers, or kept until attach().
  // The mount passes those the index holds that never reached a segment (a
  // crash before the flushers wrote them).
  void add_unlogged(std::vector<RecordEntry> entries);

  Status journal(const std::vector<Put>& puts, const std::vector<Inode*>& deletes,
                 uint64_t next_ino) override;
  // Logged like the others (a P key until it is in a segment), and kept as
  // a U key (index.h) so that this node goes on hiding the file.
  Status journal_peer_unlink(const PeerOrigin& origin, int64_t mtime_ns) override;

 private:
  const bool read_only_;
  SeqCounter* const seqs_;
  IndexWriter* index_ = nullptr;
  Flusher* flusher_ = nullptr;
  std::vector<RecordEntry> unlogged_;  // before attach()
};

}  // namespace kvfs
