// See bench_timing.h.
#include "cuda/common/bench_timing.h"

#include <algorithm>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {

double median_event_ms(cudaStream_t s, const std::function<void()>& fn, int repeats, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int i = 0; i < repeats; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ts.begin(), ts.end());
  return ts.empty() ? 0.0 : double(ts[ts.size() / 2]);
}

}  // namespace mk::cuda
