#include "core/index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

namespace kvfs {
namespace {

std::string inode_key(uint64_t ino) {
  std::string k(9, '\0');
  k[0] = 'I';
  for (int i = 0; i < 8; ++i) k[1 + i] = static_cast<char>(ino >> (56 - 8 * i));
  return k;
}

Status from_rocks(const rocksdb::Status& s, const char* what) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(what);
  if (s.IsCorruption()) return Status::Corruption(std::string(what) + ": " + s.ToString());
  if (s.IsNoSpace()) return Status::NoSpace(std::string(what) + ": " + s.ToString());
  return Status::IOError(std::string(what) + ": " + s.ToString());
}

}  // namespace

struct Index::Impl {
  std::unique_ptr<rocksdb::DB> db;
};

Result<std::unique_ptr<Index>> Index::Open(const std::string& dir) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  o.keep_log_file_num = 3;
  o.max_log_file_size = 8 << 20;
  o.write_buffer_size = 8 << 20;  // counts against the daemon's fixed overhead
  o.max_write_buffer_number = 2;
  o.compression = rocksdb::kNoCompression;  // values are small and hashed
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = nullptr;
  t.no_block_cache = false;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, dir, &raw);
  if (!s.ok()) return from_rocks(s, ("open index " + dir).c_str());
  std::unique_ptr<Index> idx(new Index);
  idx->impl_ = std::make_unique<Impl>();
  idx->impl_->db.reset(raw);
  return idx;
}

Status Index::Destroy(const std::string& dir) {
  rocksdb::Options o;
  return from_rocks(rocksdb::DestroyDB(dir, o), "destroy index");
}

Index::~Index() {
  if (impl_ && impl_->db) {
    (void)impl_->db->Close();
  }
}

Result<std::string> Index::get_meta(const std::string& key) {
  std::string v;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), "M:" + key, &v);
  if (!s.ok()) return from_rocks(s, key.c_str());
  return v;
}

Status Index::put_meta(const std::string& key, const std::string& value) {
  rocksdb::WriteOptions w;
  w.sync = true;
  return from_rocks(impl_->db->Put(w, "M:" + key, value), "put meta");
}

Status Index::load_all(const std::function<void(InodeSnapshot&&)>& fn) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro));
  for (it->Seek("I"); it->Valid() && it->key().starts_with("I"); it->Next()) {
    InodeSnapshot s;
    rocksdb::Slice v = it->value();
    KVFS_RETURN_IF_ERROR(decode_snapshot(std::string_view(v.data(), v.size()), &s));
    if (it->key().size() != 9 || inode_key(s.ino) != it->key().ToString())
      return Status::Corruption("index key does not match its inode");
    fn(std::move(s));
  }
  return from_rocks(it->status(), "scan index");
}

Status Index::commit(const IndexBatch& b, bool sync) {
  rocksdb::WriteBatch wb;
  std::string buf;
  for (const InodeSnapshot* s : b.puts) {
    buf.clear();
    encode_snapshot(*s, &buf);
    wb.Put(inode_key(s->ino), buf);
  }
  for (uint64_t ino : b.deletes) wb.Delete(inode_key(ino));
  if (b.next_ino) wb.Put("M:next_ino", std::to_string(b.next_ino));
  if (b.next_seq) wb.Put("M:next_seq", std::to_string(b.next_seq));
  rocksdb::WriteOptions w;
  w.sync = sync;
  return from_rocks(impl_->db->Write(w, &wb), "commit index");
}

}  // namespace kvfs
