// Launcher of the on-device sampler (sample.h).
#include "cuda/ops/sample.h"

#include "core/status.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.cuh"
#include "cuda/ops/sample.cuh"

namespace mk::cuda {
namespace {

__global__ void __launch_bounds__(1024) sample_token_kernel(const float* logits, int n_vocab, SampleRule rule,
                                                            uint64_t seed, uint64_t draw, int32_t* out) {
  pdl_wait();
  const int32_t id = block_sample(logits, n_vocab, rule, seed, draw);
  if (threadIdx.x == 0) *out = id;
}

__global__ void __launch_bounds__(1024) grid_sample_kernel(const float* logits, int n_vocab, SampleRule rule,
                                                           uint64_t seed, uint64_t draw, GridSampleScratch sc,
                                                           int32_t* out) {
  pdl_wait();
  const int32_t id = grid_sample(logits, n_vocab, rule, seed, draw, nullptr, sc);
  if (id != GRID_SAMPLE_OTHER && threadIdx.x == 0) *out = id;
}

}  // namespace

void sample_token(const Stream& s, const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                  uint64_t draw, int32_t* out, int blocks, const GridSampleScratch& scratch) {
  MK_CHECK(n_vocab <= SAMPLE_SELECT_MAX_VOCAB || (rule.top_k == 0 && rule.top_p >= 1.f));
  if (blocks <= 1) {
    launch(s, dim3(1), dim3(1024), 0, sample_token_kernel, logits, n_vocab, rule, seed, draw, out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  MK_CHECK(blocks <= 1024 && scratch.part && scratch.kept && scratch.counter && scratch.hist && scratch.barrier &&
           scratch.ties);
  launch(s, dim3(blocks), dim3(1024), 0, grid_sample_kernel, logits, n_vocab, rule, seed, draw, scratch, out);
  CUDA_CHECK_LAUNCH();
}

void sample_token(const Stream& s, const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                  uint64_t draw, int32_t* out, int blocks) {
  if (blocks <= 1) return sample_token(s, logits, n_vocab, rule, seed, draw, out, 1, GridSampleScratch{});
  MK_CHECK(blocks <= 1024);
  const size_t total = grid_sample_scratch_bytes(blocks);
  void* scratch = nullptr;
  CUDA_CHECK(cudaMallocAsync(&scratch, total, s.stream));
  CUDA_CHECK(cudaMemsetAsync(scratch, 0, total, s.stream));
  const GridSampleScratch sc = grid_sample_scratch_at(scratch, blocks);
  sample_token(s, logits, n_vocab, rule, seed, draw, out, blocks, sc);
  CUDA_CHECK(cudaFreeAsync(scratch, s.stream));
}

Expected<int32_t> drawn_token(cudaStream_t s, const int32_t* out, int n_vocab, const char* what) {
  int32_t id = -1;
  MK_TRY(cuda_status(cudaMemcpyAsync(&id, out, 4, cudaMemcpyDeviceToHost, s), what));
  MK_TRY(cuda_status(cudaStreamSynchronize(s), what));
  if (id < 0 || id >= n_vocab) return make_error(what, ": no finite logit to draw from (the device draw returned ", id, ")");
  return id;
}

}  // namespace mk::cuda
