// Event timing and scratch buffers for the in-process benchmarks (read_ceiling.cu, backend/bench_probe.cu).
#pragma once
#include <cuda_runtime.h>

#include <functional>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {

// Milliseconds between two events recorded on a stream around the work fn enqueues (one pair, reused).
struct EventPair {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  template <class F>
  float time(cudaStream_t s, F&& fn) {
    CUDA_CHECK(cudaEventRecord(e0, s));
    fn();
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  }
};

// Median milliseconds of fn() over `repeats` runs on stream s, one event pair around each, after `warmup`
// untimed runs.
double median_event_ms(cudaStream_t s, const std::function<void()>& fn, int repeats, int warmup);

// A device allocation freed when it goes out of scope.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

}  // namespace mk::cuda
