// ThreadPool implementation: workers sleep on a condition variable and wake per job (generation);
// chunks are claimed with an atomic counter so that uneven chunks balance themselves.
#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace mk {

namespace {
thread_local bool t_inside_task = false;  // true while this thread runs a chunk of some pool
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < n_threads - 1; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("MK_NUM_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

void ThreadPool::run_chunks() {
  t_inside_task = true;
  for (;;) {
    int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
  t_inside_task = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(m_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(m_);
      if (--n_active_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  // Inline when there is nothing to share, when called from inside a task, or when another thread
  // holds the pool: waiting for it could deadlock, and the result is the same.
  std::unique_lock busy(busy_, std::defer_lock);
  if (workers_.empty() || n <= min_chunk || t_inside_task || !busy.try_lock()) {
    fn(0, n);
    return;
  }
  // About four chunks per thread, so a thread slowed down by others does not hold everyone up.
  int64_t chunk = std::max(min_chunk, (n + 4 * n_threads() - 1) / (4 * n_threads()));
  {
    std::lock_guard lock(m_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    n_active_ = int(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  run_chunks();
  // The job fields must stay valid until every worker has left run_chunks().
  std::unique_lock lock(m_);
  cv_done_.wait(lock, [&] { return n_active_ == 0; });
  fn_ = nullptr;
}

}  // namespace mk
