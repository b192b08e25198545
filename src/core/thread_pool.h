// ThreadPool: a small persistent pool for data-parallel loops on the host (the CPU reference's
// matrix-vector products). The calling thread takes part in the work; a call made while the pool is
// busy (another thread, or from inside a task) runs inline instead of waiting, so it never deadlocks.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mk {

class ThreadPool {
 public:
  // n_threads counts the caller: n_threads - 1 workers are started. n_threads <= 0: hardware threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over consecutive chunks covering [0, n), each at least min_chunk long
  // (except the last), spread over the threads. Returns when every chunk is done.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool used by the cpu:: ops. Size: MK_NUM_THREADS, else the hardware threads.
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex busy_;                 // held by the caller of parallel_for for the whole loop
  std::mutex m_;                    // guards the job fields below and the wake-up
  std::condition_variable cv_start_, cv_done_;
  uint64_t generation_ = 0;         // bumped per job: a worker runs each generation once
  bool stop_ = false;
  int n_active_ = 0;                // workers still running the current job
  // The current job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};    // next chunk start, claimed with fetch_add
};

}  // namespace mk
