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

__global__ void __launch_bounds__(1024) grid_sample_kernel(const float* logits, int n_vocab, float T, float min_p,
                                                           uint64_t seed, uint64_t draw, GridSampleScratch sc,
                                                           int32_t* out) {
  pdl_wait();
  const int32_t id = grid_sample(logits, n_vocab, T, min_p, seed, draw, nullptr, sc);
  if (id != GRID_SAMPLE_OTHER && threadIdx.x == 0) *out = id;
}

}  // namespace

void sample_token(const Stream& s, const float* logits, int n_vocab, float T, float min_p, uint64_t seed, uint64_t draw,
                  int32_t* out, int blocks) {
  if (blocks <= 1) {
    launch(s, dim3(1), dim3(1024), 0, sample_token_kernel, logits, n_vocab, T, min_p, seed, draw, out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  void* scratch = nullptr;
  const size_t part = size_t(blocks) * sizeof(double), kept = size_t(blocks) * sizeof(int);
  CUDA_CHECK(cudaMallocAsync(&scratch, part + kept + sizeof(unsigned), s.stream));
  CUDA_CHECK(cudaMemsetAsync(scratch, 0, part + kept + sizeof(unsigned), s.stream));
  char* p = static_cast<char*>(scratch);
  const GridSampleScratch sc{reinterpret_cast<double*>(p), reinterpret_cast<int*>(p + part),
                             reinterpret_cast<unsigned*>(p + part + kept)};
  launch(s, dim3(blocks), dim3(1024), 0, grid_sample_kernel, logits, n_vocab, T, min_p, seed, draw, sc, out);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaFreeAsync(scratch, s.stream));
}

}  // namespace mk::cuda
