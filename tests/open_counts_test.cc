// SPDX-License-Identifier: Apache-2.0
// OpenCounts on their own: handles, writers and the active (unsealed)
// writers through opens, close()s and releases, and when the kernel's page
// cache may be kept (close-to-open).
#include "core/inode/open_counts.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(OpenCounts, AWriterIsActiveUntilItsCloseAndCountedUntilItsRelease) {
  OpenCounts o;
  o.opened(/*writable=*/true);
  o.opened(/*writable=*/false);
  EXPECT_EQ(o.handles(), 2u);
  EXPECT_EQ(o.writers(), 1u);
  EXPECT_EQ(o.active_writers(), 1u);
  o.sealed();  // the client's close()
  EXPECT_EQ(o.active_writers(), 0u);
  o.unsealed();  // written again through the same handle (a dup, mmap)
  EXPECT_EQ(o.active_writers(), 1u);
  o.sealed();
  EXPECT_FALSE(o.released(/*writable=*/false, /*was_sealed=*/false));
  EXPECT_TRUE(o.released(/*writable=*/true, /*was_sealed=*/true));  // the last writer
  EXPECT_EQ(o.handles(), 0u);
  EXPECT_EQ(o.writers(), 0u);
  EXPECT_EQ(o.active_writers(), 0u);
}

TEST(OpenCounts, AReleaseWithoutCloseEndsTheActiveWriterToo) {
  OpenCounts o;
  o.opened(true);
  o.opened(true);
  EXPECT_FALSE(o.released(true, /*was_sealed=*/false));  // another writer is open
  EXPECT_EQ(o.active_writers(), 1u);
  EXPECT_TRUE(o.released(true, false));
  EXPECT_EQ(o.active_writers(), 0u);
}

TEST(OpenCounts, TheKernelCacheIsKeptOnlyByAReaderAfterAnOpenWithNoChangeSince) {
  OpenCounts o;
  EXPECT_FALSE(o.keep_kernel_cache(false));  // the first open: nothing cached yet
  EXPECT_TRUE(o.keep_kernel_cache(false));   // unchanged since
  o.data_changed();
  EXPECT_FALSE(o.keep_kernel_cache(false));  // written since the last open
  EXPECT_TRUE(o.keep_kernel_cache(false));
  EXPECT_FALSE(o.keep_kernel_cache(true));  // a writer never keeps it
  o.opened(true);
  EXPECT_FALSE(o.keep_kernel_cache(false));  // nor a reader while one is open
  EXPECT_TRUE(o.released(true, false));
  EXPECT_TRUE(o.keep_kernel_cache(false));
}

}  // namespace
}  // namespace kvfs
