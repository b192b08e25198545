// On-device sampling of one token (temperature, top-k, top-p and min-p: the host Sampler's rule, see sample.cuh). The
// decode step draws inside its finish kernel (grid_sample, or block_sample with one block); this launcher serves the
// tests and benchmarks.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

// The processors the device draw applies, in the host Sampler's order (runtime/sampler.h; repetition penalty and the
// greedy shortcut stay with the caller): temperature > 0, then top-k (0 or >= the candidates: off; 1 keeps the largest
// candidates, ties included), top-p (1: off), min-p (0: off).
struct SampleRule {
  float temperature = 1.f;
  int top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
};

// Radix levels of the top-k / top-p selection's histograms a draw may use (4 for top-k, 4 for top-p; sample_select.cuh).
constexpr int SAMPLE_SELECT_LEVELS = 8;
constexpr int SAMPLE_SELECT_BINS = 256;
constexpr int SAMPLE_SELECT_MAX_VOCAB = 1 << 20;  // the selection's fixed-point mass sums fit in 64 bits up to this

// grid_sample's scratch (sample.cuh), all zero before the first draw (each draw leaves it so). part, kept: [blocks]
// per-block weight sums and largest kept ids; counter: the draw's ticket; hist: [SAMPLE_SELECT_LEVELS][3][256] the
// selection's merged histograms (count, mass high and low words); barrier: the selection's grid barrier; ties: [blocks]
// per-block counts of the candidates tied at the top-p boundary.
struct GridSampleScratch {
  double* part = nullptr;
  int* kept = nullptr;
  unsigned* counter = nullptr;
  unsigned long long* hist = nullptr;
  unsigned* barrier = nullptr;
  int* ties = nullptr;
};

// Bytes of each GridSampleScratch buffer for `blocks` blocks, in the struct's order.
inline void grid_sample_scratch_sizes(int blocks, size_t out[6]) {
  out[0] = size_t(blocks) * sizeof(double);
  out[1] = size_t(blocks) * sizeof(int);
  out[2] = sizeof(unsigned);
  out[3] = size_t(SAMPLE_SELECT_LEVELS) * 3 * SAMPLE_SELECT_BINS * sizeof(unsigned long long);
  out[4] = sizeof(unsigned);
  out[5] = size_t(blocks) * sizeof(int);
}

// One block of memory for all of a GridSampleScratch: its bytes (each buffer 256-byte aligned), and the scratch
// carved from such a block at `base` (the allocating sample_token below, tests).
inline size_t grid_sample_scratch_bytes(int blocks) {
  size_t sizes[6], total = 0;
  grid_sample_scratch_sizes(blocks, sizes);
  for (size_t b : sizes) total += (b + 255) / 256 * 256;
  return total;
}
inline GridSampleScratch grid_sample_scratch_at(void* base, int blocks) {
  size_t sizes[6];
  grid_sample_scratch_sizes(blocks, sizes);
  char* p[6];
  p[0] = static_cast<char*>(base);
  for (int i = 1; i < 6; ++i) p[i] = p[i - 1] + (sizes[i - 1] + 255) / 256 * 256;
  return {reinterpret_cast<double*>(p[0]), reinterpret_cast<int*>(p[1]), reinterpret_cast<unsigned*>(p[2]),
          reinterpret_cast<unsigned long long*>(p[3]), reinterpret_cast<unsigned*>(p[4]), reinterpret_cast<int*>(p[5])};
}

// *out = the id the host Sampler draws from logits[n_vocab] (device, f32; with top-k / top-p n_vocab <=
// SAMPLE_SELECT_MAX_VOCAB) with `rule`, draw `draw` of `seed` (-1 when
// no logit is finite). blocks = 1: block_sample, one block of 1024 threads; more (at most 1024, and at most the number
// of blocks the GPU holds at once when top-k or top-p is on: the selection waits for every block): grid_sample over
// that many blocks (its scratch allocated and freed on the stream).
void sample_token(const Stream& s, const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                  uint64_t draw, int32_t* out, int blocks = 1);
// The same draw with the caller's grid_sample scratch for `blocks` blocks (all zero, and left so; unused with one
// block): no allocation, for callers that draw often (CudaBackend::sample_last shares its finish kernel's scratch).
void sample_token(const Stream& s, const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                  uint64_t draw, int32_t* out, int blocks, const GridSampleScratch& scratch);
// The id a draw left at out (device) once stream s reaches it (s is synchronised): an error, prefixed with `what`, when
// it is no id of the n_vocab (the draw found no finite logit) or the stream failed.
Expected<int32_t> drawn_token(cudaStream_t s, const int32_t* out, int n_vocab, const char* what);

}  // namespace mk::cuda
