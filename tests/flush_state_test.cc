// SPDX-License-Identifier: Apache-2.0
// FlushState: the transitions of a file through a flush, on their own.
#include "core/inode/flush_state.h"

#include <gtest/gtest.h>

#include "tests/flush_state_testing.h"

namespace kvfs {
namespace {

FlushKey key() {
  return FlushStateTestAccess::key();
}

TEST(FlushState, AChangeIsDirtyUntilACommitOfItsVersion) {
  FlushState f;
  EXPECT_FALSE(f.dirty());
  f.changed();
  EXPECT_TRUE(f.dirty());
  EXPECT_TRUE(f.enqueue(key()));
  EXPECT_FALSE(f.enqueue(key()));  // queued once
  f.dequeued(key());
  const uint64_t v = f.version();
  f.begin(key(), true);
  EXPECT_TRUE(f.in_flight());
  EXPECT_TRUE(f.logged());
  EXPECT_FALSE(f.committed(key(), v, true));
  EXPECT_FALSE(f.dirty());
  EXPECT_FALSE(f.in_flight());
}

TEST(FlushState, AnAtimeAloneIsNotDirtyAndIsTakenOnceByFlushAll) {
  FlushState f;
  f.atime_changed();
  EXPECT_FALSE(f.dirty());  // no flush of its own
  EXPECT_TRUE(f.take_atime(key()));
  EXPECT_FALSE(f.take_atime(key()));  // taken: the next flush_all has nothing
}

TEST(FlushState, AChangeWhileInFlightStaysDirtyAndGoesAgain) {
  FlushState f;
  f.changed();
  const uint64_t v = f.version();
  f.begin(key(), true);
  f.client_wrote();
  EXPECT_FALSE(f.enqueue(key()));  // in flight: marked to go again instead
  EXPECT_TRUE(f.committed(key(), v, true));
  EXPECT_TRUE(f.dirty());  // the write after the capture is not durable
  EXPECT_TRUE(f.enqueue(key()));
}

TEST(FlushState, ABlocksOnlyWriteOutCommitsNoVersion) {
  FlushState f;
  f.changed();
  f.begin(key(), false);
  EXPECT_FALSE(f.logged());
  EXPECT_FALSE(f.committed(key(), 0, true));
  EXPECT_TRUE(f.dirty());
}

TEST(FlushState, ARenameInFlightCommitsAgainEvenWhenClean) {
  FlushState f;
  f.changed();
  const uint64_t v = f.version();
  f.begin(key(), true);
  f.renamed();
  EXPECT_TRUE(f.committed(key(), v, true));
  // A version of its own, so that the next capture is not skipped as clean.
  EXPECT_TRUE(f.dirty());
  EXPECT_GT(f.version(), v);
  // Unlinked meanwhile: nothing to commit under a name.
  FlushState g;
  g.changed();
  g.begin(key(), true);
  g.renamed();
  EXPECT_TRUE(g.committed(key(), g.version(), false));
  EXPECT_FALSE(g.dirty());
}

TEST(FlushState, ARenameOutsideAFlushChangesNothing) {
  FlushState f;
  f.renamed();
  EXPECT_FALSE(f.dirty());
  EXPECT_TRUE(f.enqueue(key()));
}

TEST(FlushState, AnFsyncIgnoresTheFailureOfAnAttemptBeforeIt) {
  FlushState f;
  f.changed();
  f.begin(key(), true);  // attempt 1, in flight when the fsync begins
  f.client_wrote();
  const FlushMark m = f.begin_fsync();
  EXPECT_TRUE(f.syncing());
  f.failed(key(), Status::IOError("before the fsync"));
  EXPECT_FALSE(f.failed_since(m));
  EXPECT_FALSE(f.error().ok());  // still reported by flush_all
  f.begin(key(), true);          // attempt 2: after the fsync began
  f.failed(key(), Status::NoSpace("after"));
  EXPECT_TRUE(f.failed_since(m));
  EXPECT_EQ(f.error().code(), Status::Code::kNoSpace);
  f.begin(key(), true);
  EXPECT_FALSE(f.committed(key(), m.version, true));
  EXPECT_TRUE(f.durable(m));
  EXPECT_TRUE(f.error().ok());  // a commit clears the last failure
  f.end_fsync();
  EXPECT_FALSE(f.syncing());
}

TEST(FlushState, ACopyForwardIsReclaimingUntilCommittedAndAClientWriteEndsIt) {
  FlushState f;
  f.copied_forward();
  EXPECT_TRUE(f.reclaiming());
  f.begin(key(), true);
  EXPECT_FALSE(f.committed(key(), f.version(), true));
  EXPECT_FALSE(f.reclaiming());
  f.copied_forward();
  f.client_wrote();  // the flush gate applies to it again
  EXPECT_FALSE(f.reclaiming());
}

TEST(FlushState, TrackedIsSetOnce) {
  FlushState f;
  EXPECT_TRUE(f.set_tracked(key(), true));
  EXPECT_FALSE(f.set_tracked(key(), true));
  EXPECT_TRUE(f.set_tracked(key(), false));
  EXPECT_FALSE(f.set_tracked(key(), false));
}

TEST(FlushState, AbandonedCaptureGoesBackWithoutACommit) {
  FlushState f;
  f.changed();
  f.begin(key(), true);
  f.renamed();
  f.abandon(key());
  EXPECT_FALSE(f.in_flight());
  EXPECT_TRUE(f.dirty());
  EXPECT_TRUE(f.may_capture_now(key()));
}

using FlushStateDeathTest = ::testing::Test;

TEST_F(FlushStateDeathTest, TransitionsOutOfOrderAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FlushState f;
        f.changed();
        f.begin(key(), true);
        f.begin(key(), true);
      },
      "a second flush captured a file in flight");
  EXPECT_DEATH(
      {
        FlushState f;
        f.changed();
        (void)f.committed(key(), f.version(), true);
      },
      "a commit outside a flush");
  EXPECT_DEATH(
      {
        FlushState f;
        f.changed();
        f.begin(key(), true);
        (void)f.committed(key(), f.version() + 1, true);
      },
      "a commit of a version never made");
  EXPECT_DEATH({ FlushState().end_fsync(); }, "end_fsync without begin_fsync");
}

}  // namespace
}  // namespace kvfs
