// See bench_timing.h.
#include "cuda/common/bench_timing.h"

#include <algorithm>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {

double median_event_ms(cudaStream_t s, const std::function<void()>& fn, int repeats, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  CUDA_CHECK(cudaStreamSynchronize(s));
  EventPair ev;
  std::vector<float> ts;
  for (int i = 0; i < repeats; ++i) ts.push_back(ev.time(s, fn));
  std::sort(ts.begin(), ts.end());
  return ts.empty() ? 0.0 : double(ts[ts.size() / 2]);
}

}  // namespace mk::cuda
