// SPDX-License-Identifier: Apache-2.0
// HeadPublisher: this node's head in a shared backing dir (disk_layout.h,
// NodeHead): the segments it appends to and how far their records are
// complete, as the name of one empty file in heads/ that only this node
// renames. SegmentStore owns it and calls publish() when that changes (a
// batch synced, a segment closed), so a peer that lists heads/ after a
// flush's sync sees its records without opening any segment that did not
// move.
//
// Thread-safe. Overlapping publish() calls are combined: one thread renames
// while the others mark the state changed and return; it renames again
// until what it published is the state it last read, at most kMaxRounds
// times (then the change waits for publish_pending()). mu_ is never held
// across a backing call.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/backing/backing_fs.h"
#include "core/backing/disk_layout.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;

class HeadPublisher {
 public:
  // The state now: last_id and open (ascending id); node and gen are set here.
  using Source = std::function<layout::NodeHead()>;
  // io (optional) marks each rename as a backing call.
  // fs: the calls the head files are made with (nullptr: the real ones).
  HeadPublisher(std::string backing, std::string node, BackingIo* io, Source source,
                BackingFs* fs = nullptr);

  // At mount, before any segment is open: makes heads/ if missing, takes
  // over the newest head an earlier run of this node left (its gen goes
  // on), removes any other of its names, and publishes the state now.
  Status init();
  // Publishes the state now if it differs from the last published. A
  // failed rename is logged (rate-limited) and tried again at the next
  // call; peers meanwhile read a head that lags, and look past a head that
  // stays unchanged now and then (peer_log.h).
  void publish();
  // publish() if a change is pending: one a failed rename left, or one
  // left after publish()'s last round. Called on a timer (PeerLog's passes).
  void publish_pending();
  uint64_t renames() const;

 private:
  Status rename_to(const std::string& name);
  static constexpr int kMaxRounds = 3;

  const std::string dir_;  // <backing>/heads
  const std::string node_;
  BackingIo* const io_;
  BackingFs* const fs_;
  const Source source_;

  mutable std::mutex mu_;
  bool busy_ = false;     // a thread is publishing; guarded by mu_
  bool dirty_ = false;    // the state changed since it read it; guarded by mu_
  uint64_t gen_ = 0;      // of current_; guarded by mu_
  std::string current_;   // the name now, "" if none; guarded by mu_
  uint64_t renames_ = 0;  // guarded by mu_
};

}  // namespace kvfs
