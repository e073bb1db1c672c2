// SPDX-License-Identifier: Apache-2.0
// Namespace: the running tree's changes (create, rename, unlink, drop,
// evictions) and their journal, and the rule that lookups never wait for a
// journal commit (the index write of a change runs under commit_mu_, not
// under the lock lookups take).
#include "core/namespace/namespace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

namespace kvfs {
namespace {

// Records every journal call; can hold one call until released, or fail.
class TestJournal : public Journal {
 public:
  Status journal(const std::vector<Put>& puts, const std::vector<Inode*>& dels, uint64_t) override {
    std::unique_lock l(mu_);
    ++calls;
    for (const Put& p : puts) put_names.emplace_back(p.name);
    deleted += dels.size();
    if (gated_) {
      entered_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return released_; });
      gated_ = false;
    }
    return fail;
  }
  void gate() {
    std::lock_guard l(mu_);
    gated_ = true;
    entered_ = released_ = false;
  }
  void wait_entered() {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return entered_; });
  }
  void release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }

  int calls = 0;
  size_t deleted = 0;
  std::vector<std::string> put_names;
  Status fail;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool gated_ = false, entered_ = false, released_ = false;
};

class NamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ns_.ensure_root(0, 0).ok()); }

  InodeRef make(uint64_t parent, const std::string& name, bool dir, bool committed = true) {
    bool created = false;
    auto r =
        ns_.create(parent, name, {(dir ? S_IFDIR : S_IFREG) | 0644u, 0, 0, {}, 0}, true, &created);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(created);
    if (!r.ok()) return nullptr;
    // As after a flush: the index knows the file, so changes are journaled.
    if (committed && !(*r)->committed) (*r)->committed = std::make_unique<InodeSnapshot>();
    return *r;
  }
  bool exists(uint64_t parent, const std::string& name) { return ns_.lookup(parent, name).ok(); }

  TestJournal journal_;
  Namespace ns_{&journal_, &system_clock()};
};

TEST_F(NamespaceTest, LookupsGoOnWhileAJournalCommitRuns) {
  InodeRef a = make(kRootIno, "a", false);
  ASSERT_TRUE(a);
  journal_.gate();
  auto renamer =
      std::async(std::launch::async, [&] { return ns_.rename(kRootIno, "a", kRootIno, "b", 0); });
  journal_.wait_entered();
  // A flusher's capture and commit take commit_mu shared: they must not run
  // inside the rename's commit (the rename's seq is taken, its change not
  // yet applied; a capture now would snapshot the old name with a newer seq).
  EXPECT_FALSE(ns_.commit_mu().try_lock_shared());
  // The rename is inside its index commit. Readers of the tree do not wait
  // for it (a bounded wait: without the split they would block until the
  // release below, which only comes after).
  auto reader = std::async(std::launch::async, [&] {
    int seen = exists(kRootIno, "a") + 2 * exists(kRootIno, "b");
    int entries = 0;
    EXPECT_TRUE(ns_.readdir(kRootIno, 0,
                            [&](std::string_view, uint64_t, uint32_t, uint64_t) {
                              ++entries;
                              return true;
                            })
                    .ok());
    EXPECT_EQ(ns_.path(kRootIno, "a"), "/a");
    EXPECT_EQ(ns_.get(a->ino), a);
    return std::make_pair(seen, entries);
  });
  const bool done = reader.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  journal_.release();
  ASSERT_TRUE(done) << "a lookup waited for a journal commit";
  // Not applied before its commit returns: the old name is what they saw.
  EXPECT_EQ(reader.get(), std::make_pair(1, 3));  // ".", "..", "a"
  auto r = renamer.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(exists(kRootIno, "a"));
  EXPECT_TRUE(exists(kRootIno, "b"));
}

TEST_F(NamespaceTest, AFailedJournalCommitChangesNothing) {
  InodeRef d = make(kRootIno, "d", true);
  InodeRef a = make(d->ino, "a", false);
  InodeRef b = make(kRootIno, "b", false);
  journal_.fail = Status::IOError("index down");
  EXPECT_EQ(ns_.rename(d->ino, "a", kRootIno, "b", 0).status().code(), Status::Code::kIOError);
  EXPECT_EQ(ns_.remove(kRootIno, "b", false).status().code(), Status::Code::kIOError);
  EXPECT_EQ(ns_.drop(a).code(), Status::Code::kIOError);
  EXPECT_EQ(ns_.remove_empty_dir(d).status().code(), Status::Code::kBusy);  // not empty
  bool created = false;
  EXPECT_FALSE(ns_.create(kRootIno, "sub", {S_IFDIR | 0755u, 0, 0, {}, 0}, true, &created).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ((*ns_.lookup(d->ino, "a")), a);
  EXPECT_EQ((*ns_.lookup(kRootIno, "b")), b);
  EXPECT_FALSE(exists(kRootIno, "sub"));
  EXPECT_TRUE(a->linked.load());
  EXPECT_TRUE(b->linked.load());
}

TEST_F(NamespaceTest, OnlyWhatTheIndexKnowsIsJournaled) {
  const int base = journal_.calls;
  InodeRef f = make(kRootIno, "f", false, /*committed=*/false);
  EXPECT_EQ(journal_.calls, base);  // a new regular file waits for its flush
  ASSERT_TRUE(ns_.rename(kRootIno, "f", kRootIno, "g", 0).ok());
  EXPECT_EQ(journal_.calls, base);
  make(kRootIno, "dir", true, false);
  EXPECT_EQ(journal_.calls, base + 1);  // a directory is committed when made
  InodeRef c = make(kRootIno, "c", false);
  ASSERT_TRUE(ns_.rename(kRootIno, "c", kRootIno, "g", 0).ok());  // replaces g
  EXPECT_EQ(journal_.calls, base + 2);
  EXPECT_EQ(journal_.put_names.back(), "g");
  EXPECT_EQ(journal_.deleted, 0u);  // g was never committed
  EXPECT_FALSE(f->linked.load());
  ASSERT_TRUE(ns_.remove(kRootIno, "g", false).ok());
  EXPECT_EQ(journal_.calls, base + 3);
  EXPECT_EQ(journal_.deleted, 1u);
}

TEST_F(NamespaceTest, RenameFollowsPosixRules) {
  InodeRef d = make(kRootIno, "d", true);
  InodeRef e = make(d->ino, "e", true);
  InodeRef f = make(kRootIno, "f", false);
  make(e->ino, "x", false);
  EXPECT_EQ(ns_.rename(kRootIno, "d", e->ino, "d2", 0).status().code(),
            Status::Code::kInvalid);  // into its own subtree
  EXPECT_EQ(ns_.rename(kRootIno, "f", d->ino, "e", 0).status().code(), Status::Code::kIsDir);
  EXPECT_EQ(ns_.rename(d->ino, "e", kRootIno, "f", 0).status().code(), Status::Code::kNotDir);
  make(kRootIno, "g", false);
  EXPECT_EQ(ns_.rename(kRootIno, "f", kRootIno, "g", kRenameNoReplace).status().code(),
            Status::Code::kExists);
  InodeRef empty = make(kRootIno, "empty", true);
  EXPECT_EQ(ns_.rename(kRootIno, "empty", d->ino, "e", 0).status().code(), Status::Code::kNotEmpty);
  // Onto itself: nothing happens.
  auto same = ns_.rename(kRootIno, "f", kRootIno, "f", 0);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same);
  EXPECT_TRUE(exists(kRootIno, "f"));
  // A file renamed over another returns the one it replaced, now unlinked.
  auto r = ns_.rename(kRootIno, "f", kRootIno, "g", 0);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(*r);
  EXPECT_FALSE((*r)->linked.load());
  EXPECT_EQ(*ns_.lookup(kRootIno, "g"), f);
  EXPECT_EQ(f->name, "g");
  EXPECT_EQ(ns_.path(e->ino, "x"), "/d/e/x");
}

TEST_F(NamespaceTest, RemoveManyTakesWhatTheCallerAccepts) {
  InodeRef a = make(kRootIno, "a", false);
  InodeRef b = make(kRootIno, "b", false);
  InodeRef d = make(kRootIno, "d", true);
  std::vector<Namespace::Removed> out;
  ASSERT_TRUE(ns_.remove_many(
                     {a, b, d}, [&](Inode& in) { return in.ino != b->ino; }, &out)
                  .ok());
  ASSERT_EQ(out.size(), 1u);  // b refused, a directory never taken
  EXPECT_EQ(out[0].in, a);
  EXPECT_EQ(out[0].name, "a");
  EXPECT_FALSE(exists(kRootIno, "a"));
  EXPECT_TRUE(exists(kRootIno, "b"));
  EXPECT_TRUE(exists(kRootIno, "d"));
  // An evicted file's inode is gone from the table once nobody holds it.
  EXPECT_EQ(ns_.get(a->ino), nullptr);
  auto p = ns_.remove_empty_dir(d);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kRootIno);
  EXPECT_FALSE(exists(kRootIno, "d"));
}

TEST_F(NamespaceTest, ForgetRemovesAnUnlinkedInodeOnceTheKernelLetsGo) {
  InodeRef a = make(kRootIno, "a", false);
  a->nlookup = 2;
  ASSERT_TRUE(ns_.remove(kRootIno, "a", false).ok());
  EXPECT_EQ(ns_.get(a->ino), a);  // the kernel may still use its number
  EXPECT_EQ(ns_.forget(a->ino, 1), nullptr);
  EXPECT_EQ(ns_.forget(a->ino, 1), a);
  EXPECT_EQ(ns_.get(a->ino), nullptr);
}

}  // namespace
}  // namespace kvfs
