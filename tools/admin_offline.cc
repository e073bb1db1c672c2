// SPDX-License-Identifier: Apache-2.0
#include "tools/admin_offline.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backing/backing_nodes.h"
#include "core/backing/disk_layout.h"
#include "core/config/config.h"
#include "core/index/index.h"
#include "core/inode/inode.h"
#include "core/records/record.h"
#include "core/recovery/recovery.h"
#include "core/segments/segment_store.h"
#include "core/util/buffer.h"
#include "tools/admin_exit.h"
#include "tools/admin_format.h"

namespace kvfs::admin {

void setup_logging() {
  auto l = spdlog::stderr_color_st("kvfs-admin");
  l->set_pattern("kvfs-admin: %^%l%$: %v");
  spdlog::set_default_logger(l);
  spdlog::set_level(spdlog::level::warn);
}

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Progress: a bar on a terminal, a few plain lines otherwise.

class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(::isatty(2) == 1) {}
  ~Progress() { done(); }

  void update(uint64_t done, uint64_t total) {
    if (total == 0) return;
    const int pct = static_cast<int>(std::min<uint64_t>(100, done * 100 / total));
    if (tty_) {
      if (pct == last_pct_) return;
      const int width = 30;
      const int fill = pct * width / 100;
      std::fprintf(stderr, "\r%-14s [%s%s] %3d%%", label_.c_str(), std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(), pct);
      std::fflush(stderr);
      shown_ = true;
    } else {
      // One line per 10 %: enough for a log, not a flood.
      if (pct / 10 == last_pct_ / 10 && last_pct_ >= 0) return;
      std::fprintf(stderr, "%s: %d%% (%llu/%llu)\n", label_.c_str(), pct,
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
    }
    last_pct_ = pct;
  }

  // Clears the bar so that a message can be printed on a clean line.
  void clear() {
    if (tty_ && shown_) {
      std::fprintf(stderr, "\r%*s\r", 60, "");
      std::fflush(stderr);
      last_pct_ = -1;
      shown_ = false;
    }
  }

  void done() {
    if (tty_ && shown_) {
      std::fputc('\n', stderr);
      shown_ = false;
    }
  }

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  int last_pct_ = -1;
};

std::unique_ptr<SegmentStore> open_backing(const std::string& dir, const std::string& node_id) {
  char buf[PATH_MAX];
  if (!::realpath(dir.c_str(), buf)) fail(kExitUnreachable, dir + ": " + errno_text(errno));
  struct stat st;
  if (::stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
    fail(kExitUnreachable, dir + " is not a directory");
  // SegmentStore::Open formats an empty directory: never do that to a
  // directory that is not a kvfs backing dir.
  if (::access(layout::super_path(buf).c_str(), F_OK) != 0)
    fail(kExitUnreachable,
         dir + " is not a kvfs backing directory (no " + layout::kSuperName + ")");
  auto shared = backing_is_shared(buf);
  if (!shared.ok()) fail(kExitUnreachable, shared.status().ToString());
  if (node_id.empty() && *shared)
    fail(kExitUnreachable, dir + " is shared by nodes: give --node-id NAME (kvfs-admin nodes " +
                               dir + " lists them)");
  if (!node_id.empty()) {
    // Opening a node's store makes its lock file: never for a name that is
    // no node here (a typo would check nothing and leave a stray lock).
    if (!is_name(node_id))
      fail(kExitUsage, "--node-id " + node_id + ": letters, digits, '-' and '_' only");
    auto nodes = list_backing_nodes(buf);
    if (!nodes.ok()) fail(kExitUnreachable, nodes.status().ToString());
    std::string known;
    bool found = false;
    for (const BackingNode& n : *nodes) {
      found |= n.node == node_id;
      known += (known.empty() ? "" : ", ") + n.node;
    }
    if (!found)
      fail(kExitUnreachable, dir + " has no node '" + node_id +
                                 "' (nodes: " + (known.empty() ? "none" : known) + ")");
  }
  StoreConfig cfg;
  cfg.backing_dir = buf;
  cfg.node_id = node_id;
  cfg.read_only = true;  // only the index is written (rebuild-index)
  cfg.direct_io = false;
  auto s = SegmentStore::Open(cfg);
  if (!s.ok()) {
    const Status& e = s.status();
    std::string msg = e.message().empty() ? e.ToString() : e.message();
    if (e.code() == Status::Code::kBusy) msg += "; unmount it first";
    fail(kExitUnreachable, msg);
  }
  return std::move(*s);
}

bool looks_like_rocksdb_dir(const std::string& dir) {
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string n = de.path().filename().string();
    auto ends = [&](const char* suf) {
      const size_t l = std::strlen(suf);
      return n.size() >= l && n.compare(n.size() - l, l, suf) == 0;
    };
    if (n == layout::kIndexLockName || n == "CURRENT" || n == "IDENTITY" || n == "LOCK" ||
        n.rfind("LOG", 0) == 0 || n.rfind("MANIFEST-", 0) == 0 || n.rfind("OPTIONS-", 0) == 0 ||
        ends(".sst") || ends(".log") || ends(".blob") || ends(".dbtmp"))
      continue;
    return false;
  }
  return !ec;
}

class Fsck {
 public:
  explicit Fsck(const OfflineOpts& o) : o_(o) {}

  int run() {
    segs_ = open_backing(o_.backing, o_.node_id);
    std::printf("kvfs fsck %s (backing id %s)\n", o_.backing.c_str(), segs_->backing_id().c_str());
    scan_segments();
    load_snapshots();
    check_namespace();
    verify_data();
    report();
    return problems_ == 0 ? kExitOk : kExitProblems;
  }

 private:
  void problem(const std::string& m) {
    ++problems_;
    if (problems_ > 100) return;
    progress_clear();
    std::printf("problem: %s\n", m.c_str());
    if (problems_ == 100) std::printf("(further problems are counted, not shown)\n");
    std::fflush(stdout);
  }
  void warning(const std::string& m) {
    ++warnings_;
    progress_clear();
    std::printf("warning: %s\n", m.c_str());
    std::fflush(stdout);
  }
  void progress_clear() {
    if (bar_) bar_->clear();
  }

  void scan_segments() {
    auto list = segs_->list();
    bar_ = std::make_unique<Progress>("scan segments");
    uint64_t done = 0;
    for (const SegmentInfo& seg : list) {
      auto scan = scan_segment(*segs_, seg.id, 0, &fold_);
      const uint64_t valid = scan.ok() ? scan->end : 0;
      if (!scan.ok()) {
        problem("segment " + seg.path + ": cannot scan: " + scan.status().ToString());
      } else {
        records_ += scan->records;
        seg_records_[seg.id] = scan->records;
        if (scan->damaged > 0)
          warning("segment " + seg.path + ": " + std::to_string(scan->damaged) +
                  " records with a block that fails its checksum (not applied by a rebuild)");
        if (valid < seg.bytes) {
          ++torn_;
          warning("segment " + seg.path + ": " + std::to_string(seg.bytes - valid) +
                  " bytes after the last complete record (a crash's torn tail; ignored)");
        }
      }
      valid_[seg.id] = valid;
      seg_bytes_ += seg.bytes;
      bar_->update(++done, list.size());
    }
    bar_.reset();
    segments_ = list.size();
  }

  void from_segments() {
    from_index_ = false;
    snaps_ = fold_.snapshots();
  }

  void load_snapshots() {
    index_dir_ =
        o_.index_dir.empty() ? default_index_dir(segs_->backing_id(), o_.node_id) : o_.index_dir;
    if (!fs::exists(fs::path(index_dir_) / "CURRENT")) {
      warning("no index at " + index_dir_ +
              " (kvfs rebuilds it from the segments at the next mount); checking the "
              "segments' latest snapshots instead");
      return from_segments();
    }
    auto idx = Index::Open(index_dir_);
    if (!idx.ok()) {
      problem("cannot open the index at " + index_dir_ + ": " + idx.status().ToString() +
              " (kvfs-admin rebuild-index recreates it)");
      return from_segments();
    }
    auto id = (*idx)->get_meta("backing_id");
    if (!id.ok() || *id != segs_->backing_id()) {
      warning("the index at " + index_dir_ + " " +
              (id.ok() ? "belongs to another backing directory (" + *id + ")"
                       : "carries no backing id") +
              "; kvfs rebuilds it at the next mount; checking the segments instead");
      return from_segments();
    }
    if (auto owner = (*idx)->get_meta("node");
        segs_->shared() && owner.ok() && *owner != segs_->node()) {
      problem("the index at " + index_dir_ + " belongs to node '" + *owner + "', not '" +
              segs_->node() + "' (kvfs refuses to mount it; give --node-id " + *owner + ")");
      return from_segments();
    }
    Status s = (*idx)->load_all([&](InodeSnapshot&& snap) { snaps_.push_back(std::move(snap)); });
    if (!s.ok()) {
      problem("the index at " + index_dir_ + " is unreadable: " + s.ToString() +
              " (kvfs-admin rebuild-index recreates it)");
      return from_segments();
    }
    from_index_ = true;
    check_applied(**idx);
    // The index against the segments: a rebuild keeps the newest snapshot
    // per inode, so both should agree after a clean unmount.
    std::set<uint64_t> in_index;
    uint64_t newer = 0, stale = 0, missing = 0;
    for (const auto& snap : snaps_) {
      in_index.insert(snap.ino);
      auto it = fold_.latest().find(snap.ino);
      if (it == fold_.latest().end() || it->second.seq < snap.seq)
        ++newer;
      else if (it->second.seq > snap.seq)
        ++stale;
    }
    for (auto& [ino, l] : fold_.latest())
      if (!l.tomb && !in_index.count(ino)) ++missing;
    if (newer)
      warning(std::to_string(newer) +
              " index entries are newer than the segments (not yet written there; a "
              "rebuild would return their previous state)");
    if (stale)
      warning(std::to_string(stale) + " index entries are older than the segments' latest record");
    if (missing)
      warning(std::to_string(missing) +
              " inodes in the segments are not in the index (a rebuild would bring them back)");
  }

  // The index follows the segment log: records past its applied position in
  // some segment are not in it yet (the next mount applies them).
  void check_applied(Index& idx) {
    if (!keeps_log_positions(idx)) {
      warning(
          "the index keeps no segment positions (written by an older kvfs); the next mount "
          "takes the segments as applied");
      return;
    }
    auto known = idx.segment_states();
    if (!known.ok()) {
      problem("the index's segment positions are unreadable: " + known.status().ToString());
      return;
    }
    uint64_t segs = 0, unseen = 0, bytes = 0, records = 0;
    for (const SegmentInfo& seg : segs_->list()) {
      const uint64_t valid = valid_.count(seg.id) ? valid_[seg.id] : 0;
      auto it = known->find(seg.id);
      const uint64_t end = it == known->end() ? 0 : it->second.end;
      const uint64_t rec = it == known->end() ? 0 : it->second.records;
      // The index only moves past records once they are synced: a scan that
      // stops short of that found a damaged record (a rebuild loses the rest).
      if (valid < end)
        problem("segment " + seg.path + ": the index applied " + std::to_string(end) +
                " bytes of it, but its records read back only up to " + std::to_string(valid) +
                " (a damaged or truncated record)");
      if (valid > end) {
        ++segs;
        unseen += it == known->end();
        bytes += valid - end;
        const uint64_t total = seg_records_[seg.id];
        records += total > rec ? total - rec : 0;
      }
    }
    uint64_t gone = 0;
    for (auto& [id, st] : *known) gone += !segs_->has_segment(id);
    if (segs)
      problem("the index is behind the segments: " + std::to_string(records) + " records (" +
              human_bytes(double(bytes)) + ") in " + std::to_string(segs) + " segments (" +
              std::to_string(unseen) +
              " of them unknown to it) are not applied; the next mount applies them");
    if (gone)
      warning(std::to_string(gone) +
              " segments the index knows are gone from the backing dir (the next mount drops "
              "their files)");
  }

  std::string path_of(uint64_t ino) const {
    std::vector<std::string> parts;
    std::set<uint64_t> seen;
    while (ino != kRootIno && seen.insert(ino).second) {
      auto it = by_ino_.find(ino);
      if (it == by_ino_.end()) {
        parts.push_back("<inode " + std::to_string(ino) + ">");
        break;
      }
      parts.push_back(printable(it->second->name));
      ino = it->second->parent;
    }
    std::string p;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) p += "/" + *it;
    return p.empty() ? "/" : p;
  }

  void check_namespace() {
    for (const auto& s : snaps_) by_ino_[s.ino] = &s;
    for (const auto& s : snaps_) {
      if (S_ISDIR(s.mode))
        ++dirs_;
      else if (S_ISREG(s.mode))
        ++files_;
      if (s.ino == kRootIno) continue;
      auto p = by_ino_.find(s.parent);
      if (s.parent != kRootIno && (p == by_ino_.end() || !S_ISDIR(p->second->mode)))
        problem("inode " + std::to_string(s.ino) + " ('" + printable(s.name) +
                "') has no parent directory (inode " + std::to_string(s.parent) +
                "); kvfs drops it at mount");
      for (const auto& be : s.extents) {
        ++extents_;
        data_bytes_ += be.ext.len;
      }
    }
  }

  void verify_data() {
    BufRef buf = BufferPool::allocate(kBlockSize);
    bar_ = std::make_unique<Progress>("verify data");
    uint64_t done = 0;
    for (const auto& s : snaps_) {
      for (const auto& be : s.extents) {
        const Extent& e = be.ext;
        const std::string where = "file " + path_of(s.ino) + " (inode " + std::to_string(s.ino) +
                                  "), block " + std::to_string(be.idx);
        auto v = valid_.find(e.seg);
        if (!segs_->has_segment(e.seg)) {
          problem(where + ": segment " + std::to_string(e.seg) + " is missing");
        } else if (e.len > kBlockSize) {
          problem(where + ": extent length " + std::to_string(e.len) + " is too large");
        } else if (v != valid_.end() && e.off + e.len > v->second) {
          problem(where + ": lies past the last complete record of segment " +
                  std::to_string(e.seg) + " (lost if the index is rebuilt)");
        } else if (Status st = segs_->read_extent(e, buf); !st.ok()) {
          problem(where + ": " + st.ToString());
        } else {
          ++verified_;
        }
        done += e.len;
        bar_->update(done, data_bytes_);
      }
    }
    bar_.reset();
  }

  void report() {
    std::printf("segments: %llu (%s), %llu records, %llu torn tails\n",
                static_cast<unsigned long long>(segments_), human_bytes(double(seg_bytes_)).c_str(),
                static_cast<unsigned long long>(records_), static_cast<unsigned long long>(torn_));
    std::printf("%s: %s, %llu inodes (%llu files, %llu directories)\n",
                from_index_ ? "index" : "segments' latest snapshots",
                from_index_ ? index_dir_.c_str() : "no usable index",
                static_cast<unsigned long long>(snaps_.size()),
                static_cast<unsigned long long>(files_), static_cast<unsigned long long>(dirs_));
    std::printf(
        "data: %llu of %llu blocks verified (%s)\n", static_cast<unsigned long long>(verified_),
        static_cast<unsigned long long>(extents_), human_bytes(double(data_bytes_)).c_str());
    if (problems_ == 0)
      std::printf("clean%s\n",
                  warnings_ ? (" (" + std::to_string(warnings_) + " warnings)").c_str() : "");
    else
      std::printf("%llu problems found\n", static_cast<unsigned long long>(problems_));
  }

  OfflineOpts o_;
  std::unique_ptr<SegmentStore> segs_;
  std::unique_ptr<Progress> bar_;
  LogFold fold_;
  std::unordered_map<uint64_t, uint64_t> seg_records_;  // segment id -> complete records
  std::unordered_map<uint64_t, uint64_t> valid_;        // segment id -> bytes of complete records
  std::vector<InodeSnapshot> snaps_;
  std::unordered_map<uint64_t, const InodeSnapshot*> by_ino_;
  std::string index_dir_;
  bool from_index_ = false;
  uint64_t segments_ = 0, seg_bytes_ = 0, records_ = 0, torn_ = 0;
  uint64_t files_ = 0, dirs_ = 0, extents_ = 0, data_bytes_ = 0, verified_ = 0;
  uint64_t problems_ = 0, warnings_ = 0;
};

}  // namespace

int cmd_fsck(const OfflineOpts& o) {
  return Fsck(o).run();
}

int cmd_rebuild_index(const OfflineOpts& o) {
  auto segs = open_backing(o.backing, o.node_id);
  const std::string dir =
      o.index_dir.empty() ? default_index_dir(segs->backing_id(), o.node_id) : o.index_dir;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) fail(kExitUnreachable, dir + " is not a directory");
    if (!looks_like_rocksdb_dir(dir))
      fail(kExitUnreachable,
           dir + " holds files that are not a kvfs index; remove them or choose --index-dir");
    if (fs::exists(fs::path(dir) / "CURRENT", ec)) {
      // Never another kvfs's index in use, nor another node's.
      auto old = Index::Open(dir);
      if (!old.ok() && old.status().code() == Status::Code::kBusy)
        fail(kExitUnreachable, old.status().message());
      if (old.ok() && segs->shared())
        if (auto owner = (*old)->get_meta("node"); owner.ok() && *owner != segs->node())
          fail(kExitUnreachable, "the index at " + dir + " belongs to node '" + *owner +
                                     "', not '" + segs->node() + "'; give --node-id " + *owner +
                                     " or another --index-dir");
    }
    Status s = Index::Destroy(dir);
    if (!s.ok()) fail(kExitUnreachable, "cannot remove the old index: " + s.ToString());
  }
  fs::create_directories(dir, ec);
  if (ec) fail(kExitUnreachable, "cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  auto idx = Index::Open(dir);
  if (!idx.ok()) fail(kExitUnreachable, "cannot create the index: " + idx.status().ToString());
  CatchUpStats st;
  Status s;
  {
    Progress bar("rebuild index");
    s = rebuild_index(*segs, **idx, &st,
                      [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  if (!s.ok()) fail(kExitUnreachable, "rebuild failed: " + s.ToString());
  std::printf(
      "index rebuilt in %s (%.1f s): %llu segments, %llu records, %llu inodes, %llu "
      "tombstones, %llu torn tails\n",
      dir.c_str(), st.seconds, static_cast<unsigned long long>(segs->list().size()),
      static_cast<unsigned long long>(st.records), static_cast<unsigned long long>(st.inodes),
      static_cast<unsigned long long>(st.tombstones),
      static_cast<unsigned long long>(st.torn_tails));
  return kExitOk;
}

}  // namespace kvfs::admin
