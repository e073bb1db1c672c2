// SPDX-License-Identifier: Apache-2.0
#include "core/index/index.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <shared_mutex>

#include "core/backing/disk_layout.h"
#include "core/util/log.h"

namespace kvfs {
namespace {

LogLimiter g_reopen_log;

// RocksDB's messages go to kvfs's log, warnings and up. Its own LOG file in
// the index dir would be one more file written through write(2): a failing
// disk fails it too, and Debian's librocksdb (built with assertions) aborts
// the daemon on the next line written to a log file that saw an error.
class RocksLogger : public rocksdb::Logger {
 public:
  RocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), format, ap);
    const auto l = level >= rocksdb::InfoLogLevel::FATAL_LEVEL   ? spdlog::level::critical
                   : level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? spdlog::level::err
                                                                 : spdlog::level::warn;
    spdlog::log(l, "index (rocksdb): {}", buf);
  }
};

// A one-letter kind and a big-endian number, so that numbers sort as keys.
std::string num_key(char kind, uint64_t n) {
  std::string k(9, '\0');
  k[0] = kind;
  for (int i = 0; i < 8; ++i) k[1 + i] = static_cast<char>(n >> (56 - 8 * i));
  return k;
}

std::string inode_key(uint64_t ino) {
  return num_key('I', ino);
}

uint64_t key_num(const rocksdb::Slice& k) {
  uint64_t n = 0;
  for (size_t i = 1; i < 9 && i < k.size(); ++i) n = (n << 8) | static_cast<uint8_t>(k[i]);
  return n;
}

void put_u64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string encode_state(const SegmentLogState& st) {
  std::string v;
  put_u64(&v, st.end);
  put_u64(&v, st.records);
  put_u64(&v, st.min_seq);
  put_u64(&v, st.max_seq);
  return v;
}

Status from_rocks(const rocksdb::Status& s, const char* what) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(what);
  if (s.IsCorruption()) return Status::Corruption(std::string(what) + ": " + s.ToString());
  if (s.IsNoSpace()) return Status::NoSpace(std::string(what) + ": " + s.ToString());
  return Status::IOError(std::string(what) + ": " + s.ToString());
}

rocksdb::Options db_options() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  o.write_buffer_size = 8 << 20;  // counts against the daemon's fixed overhead
  o.max_write_buffer_number = 2;
  o.compression = rocksdb::kNoCompression;  // values are small and hashed
  o.info_log = std::make_shared<RocksLogger>();
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = nullptr;
  t.no_block_cache = false;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

}  // namespace

struct Index::Impl {
  // <dir>/kvfs.lock, flock()ed while the index is open; declared first so
  // that it is released after the database is closed.
  struct DirLock {
    int fd = -1;
    ~DirLock() {
      if (fd >= 0) ::close(fd);
    }
  } dir_lock;
  std::string dir;
  // Readers and writers hold mu shared; a reopen after a fatal write error
  // holds it exclusively. db is null while a reopen keeps failing.
  std::shared_mutex mu;
  std::unique_ptr<rocksdb::DB> db;  // guarded by mu
  bool closed = false;              // guarded by mu; close() was called
  // One commit at a time (taken before mu). RocksDB would merge concurrent
  // writers into one group commit, whose hand-over between threads goes
  // through atomics in Debian's uninstrumented librocksdb that TSan cannot
  // see; kvfs's commits are a few per second from two flushers, so the
  // serialisation costs nothing measurable and keeps the TSan run exact.
  std::mutex commit_mu;

  rocksdb::Status open_locked() {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(db_options(), dir, &raw);
    if (s.ok()) db.reset(raw);
    return s;
  }
};

Result<std::unique_ptr<Index>> Index::Open(const std::string& dir) {
  std::unique_ptr<Index> idx(new Index);
  idx->impl_ = std::make_unique<Impl>();
  idx->impl_->dir = dir;
  // RocksDB's own LOCK says only "IO error" when taken: this one says Busy,
  // so that nobody rebuilds (destroys) an index another kvfs is using.
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) ::chmod(dir.c_str(), 0700);
  const std::string lock = dir + "/" + layout::kIndexLockName;
  int& fd = idx->impl_->dir_lock.fd;
  fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "open " + lock);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e != EWOULDBLOCK) return Status::FromErrno(e, "lock " + lock);
    return Status::Busy("index directory " + dir +
                        " is in use by another kvfs: give each kvfs its own index_dir");
  }
  rocksdb::Status s = idx->impl_->open_locked();
  if (!s.ok()) return from_rocks(s, ("open index " + dir).c_str());
  return idx;
}

Status Index::Destroy(const std::string& dir) {
  rocksdb::Options o;
  return from_rocks(rocksdb::DestroyDB(dir, o), "destroy index");
}

Index::~Index() {
  close();
}

void Index::close() {
  if (!impl_) return;
  std::unique_lock l(impl_->mu);
  impl_->closed = true;
  if (impl_->db) (void)impl_->db->Close();
  impl_->db.reset();
}

Result<std::string> Index::get_meta(const std::string& key) {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  std::string v;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), "M:" + key, &v);
  if (!s.ok()) return from_rocks(s, key.c_str());
  return v;
}

Status Index::put_meta(const std::string& key, const std::string& value) {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  rocksdb::WriteOptions w;
  w.sync = true;
  return from_rocks(impl_->db->Put(w, "M:" + key, value), "put meta");
}

uint64_t Index::estimate_inodes() {
  std::shared_lock l(impl_->mu);
  uint64_t n = 0;
  if (!impl_->db || !impl_->db->GetIntProperty("rocksdb.estimate-num-keys", &n)) return 0;
  return n;
}

Status Index::load_all(const std::function<void(InodeSnapshot&&)>& fn, uint64_t lo, uint64_t hi) {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  // Keys are 'I' + the inode number big-endian: a range of numbers is a range
  // of keys. "J" bounds the whole inode space.
  const std::string upper = hi == UINT64_MAX ? std::string("J") : inode_key(hi);
  rocksdb::Slice upper_slice(upper);
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro));
  for (it->Seek(inode_key(lo)); it->Valid() && it->key().starts_with("I"); it->Next()) {
    InodeSnapshot s;
    rocksdb::Slice v = it->value();
    KVFS_RETURN_IF_ERROR(decode_snapshot(std::string_view(v.data(), v.size()), &s));
    if (it->key().size() != 9 || inode_key(s.ino) != it->key().ToString())
      return Status::Corruption("index key does not match its inode");
    fn(std::move(s));
  }
  return from_rocks(it->status(), "scan index");
}

Status Index::seqs(uint64_t ino, uint64_t* snap_seq, uint64_t* tomb_seq) {
  *snap_seq = *tomb_seq = 0;
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  std::string v;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), inode_key(ino), &v);
  if (s.ok()) {
    InodeSnapshot snap;
    KVFS_RETURN_IF_ERROR(decode_snapshot(v, &snap));
    *snap_seq = snap.seq;
  } else if (!s.IsNotFound()) {
    return from_rocks(s, "read index");
  }
  s = impl_->db->Get(rocksdb::ReadOptions(), num_key('T', ino), &v);
  if (s.ok()) {
    if (v.size() != 8) return Status::Corruption("index tombstone of inode " + std::to_string(ino));
    *tomb_seq = get_u64(v.data());
  } else if (!s.IsNotFound()) {
    return from_rocks(s, "read index");
  }
  return Status::OK();
}

namespace {
// Calls fn(key, value) for every key that starts with kind.
using KeyFn = std::function<bool(const rocksdb::Slice& key, const rocksdb::Slice& value)>;
rocksdb::Status scan_kind(rocksdb::DB* db, char kind, const KeyFn& fn) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  const std::string lo(1, kind), hi(1, static_cast<char>(kind + 1));
  rocksdb::Slice upper(hi);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(lo); it->Valid(); it->Next())
    if (!fn(it->key(), it->value())) break;
  return it->status();
}
}  // namespace

Result<std::map<uint64_t, SegmentLogState>> Index::segment_states() {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  std::map<uint64_t, SegmentLogState> out;
  bool bad = false;
  rocksdb::Status s =
      scan_kind(impl_->db.get(), 'S', [&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
        if (k.size() != 9 || v.size() != 32) return !(bad = true);
        SegmentLogState st;
        st.end = get_u64(v.data());
        st.records = get_u64(v.data() + 8);
        st.min_seq = get_u64(v.data() + 16);
        st.max_seq = get_u64(v.data() + 24);
        out[key_num(k)] = st;
        return true;
      });
  if (bad) return Status::Corruption("index: a segment log state does not decode");
  KVFS_RETURN_IF_ERROR(from_rocks(s, "scan index"));
  return out;
}

namespace {
Status scan_entries(rocksdb::DB* db, char kind, const std::function<void(RecordEntry&&)>& fn) {
  Status bad;
  rocksdb::Status s = scan_kind(db, kind, [&](const rocksdb::Slice&, const rocksdb::Slice& v) {
    std::vector<RecordEntry> es;
    bad = decode_entries(std::string_view(v.data(), v.size()), &es);
    if (!bad.ok()) return false;
    for (auto& e : es) fn(std::move(e));
    return true;
  });
  KVFS_RETURN_IF_ERROR(bad);
  return from_rocks(s, "scan index");
}
}  // namespace

Status Index::pending(const std::function<void(RecordEntry&&)>& fn) {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  return scan_entries(impl_->db.get(), 'P', fn);
}

Status Index::peer_unlinks(const std::function<void(RecordEntry&&)>& fn) {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  return scan_entries(impl_->db.get(), 'U', fn);
}

Result<uint64_t> Index::drop_tombstones() {
  std::shared_lock l(impl_->mu);
  if (!impl_->db) return Status::IOError("index unavailable");
  uint64_t n = 0;
  rocksdb::Status s =
      scan_kind(impl_->db.get(), 'T', [&](const rocksdb::Slice&, const rocksdb::Slice&) {
        ++n;
        return true;
      });
  if (!s.ok()) return from_rocks(s, "scan index");
  if (n == 0) return n;
  rocksdb::WriteOptions w;
  w.sync = true;
  s = impl_->db->DeleteRange(w, impl_->db->DefaultColumnFamily(), "T", "U");
  if (!s.ok()) return from_rocks(s, "drop tombstones");
  return n;
}

Status Index::commit(const IndexBatch& b, bool sync) {
  std::lock_guard c(impl_->commit_mu);
  rocksdb::WriteBatch wb;
  std::string buf;
  for (const InodeSnapshot* s : b.puts) {
    buf.clear();
    encode_snapshot(*s, &buf);
    wb.Put(inode_key(s->ino), buf);
  }
  for (const auto& d : b.deletes) {
    wb.Delete(inode_key(d.ino));
    if (d.tomb_seq) {
      buf.clear();
      put_u64(&buf, d.tomb_seq);
      wb.Put(num_key('T', d.ino), buf);
    }
  }
  for (uint64_t ino : b.untombs) wb.Delete(num_key('T', ino));
  for (const auto& [id, st] : b.segments) wb.Put(num_key('S', id), encode_state(st));
  for (uint64_t id : b.segment_drops) wb.Delete(num_key('S', id));
  for (const RecordEntry* e : b.pending) {
    buf.clear();
    encode_entries({*e}, &buf);
    wb.Put(num_key('P', e->snap.seq), buf);
  }
  for (uint64_t seq : b.logged) wb.Delete(num_key('P', seq));
  for (const RecordEntry* e : b.peer_unlinks) {
    buf.clear();
    encode_entries({*e}, &buf);
    wb.Put(num_key('U', e->snap.seq), buf);
  }
  for (uint64_t seq : b.peer_unlinks_done) wb.Delete(num_key('U', seq));
  if (b.next_ino) wb.Put("M:next_ino", std::to_string(b.next_ino));
  if (b.next_seq) wb.Put("M:next_seq", std::to_string(b.next_seq));
  rocksdb::WriteOptions w;
  w.sync = sync;
  rocksdb::Status s;
  {
    std::shared_lock l(impl_->mu);
    s = impl_->db ? impl_->db->Write(w, &wb) : rocksdb::Status::IOError("index unavailable");
  }
  if (s.ok() || s.IsCorruption()) return from_rocks(s, "commit index");
  // A failed WAL write or sync leaves RocksDB refusing every later write (a
  // fatal background error) even once the disk is fine again. Resume() clears
  // the errors it can; the others need the database closed and opened again,
  // which replays the WAL. Neither works while the fault lasts: then this
  // commit fails and the next one tries again. The batch is written again
  // after a recovery (its puts and deletes are idempotent).
  std::unique_lock l(impl_->mu);
  if (impl_->closed) return from_rocks(s, "commit index");
  rocksdb::Status r = impl_->db ? impl_->db->Resume() : rocksdb::Status::IOError("closed");
  if (!r.ok()) {
    if (impl_->db) (void)impl_->db->Close();
    impl_->db.reset();
    r = impl_->open_locked();
  }
  if (r.ok()) {
    spdlog::warn("index: recovered after a write error ({})", s.ToString());
    s = impl_->db->Write(w, &wb);
  } else if (uint64_t held = 0; g_reopen_log.allow(&held)) {
    spdlog::error("index: cannot recover from a write error ({}) yet: {} ({} similar not shown)",
                  s.ToString(), r.ToString(), held);
  }
  return from_rocks(s, "commit index");
}

}  // namespace kvfs
