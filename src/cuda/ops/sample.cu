// Launcher of the on-device sampler (sample.h).
#include "cuda/ops/sample.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.cuh"
#include "cuda/ops/sample.cuh"

namespace mk::cuda {
namespace {

__global__ void __launch_bounds__(1024) sample_token_kernel(const float* logits, int n_vocab, float T, float min_p,
                                                            uint64_t seed, uint64_t draw, int32_t* out) {
  pdl_wait();
  const int32_t id = block_sample(logits, n_vocab, T, min_p, seed, draw);
  if (threadIdx.x == 0) *out = id;
}

}  // namespace

void sample_token(const Stream& s, const float* logits, int n_vocab, float T, float min_p, uint64_t seed, uint64_t draw,
                  int32_t* out) {
  launch(s, dim3(1), dim3(1024), 0, sample_token_kernel, logits, n_vocab, T, min_p, seed, draw, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mk::cuda
