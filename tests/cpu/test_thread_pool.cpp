// ThreadPool: every index covered exactly once, nested and concurrent calls do not deadlock.
// Run: build/test_cpu --gtest_filter='ThreadPool*'
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace mk {
namespace {

void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, min_chunk, [&](int64_t b, int64_t e) {
    EXPECT_LE(0, b);
    EXPECT_LE(e, n);
    for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097})
      for (int64_t chunk : {1, 3, 100}) expect_each_index_once(pool, n, chunk);
  }
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  pool.parallel_for(16, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 160);
}

TEST(ThreadPool, ConcurrentCallersBothFinish) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int r = 0; r < 200; ++r)
      pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 200 * 100);
}

}  // namespace
}  // namespace mk
