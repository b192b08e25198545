// Event timing and scratch buffers for the in-process benchmarks (read_ceiling.cu, backend/bench_probe.cu).
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace mk::cuda {

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
