// On-device sampling of one token (temperature + min-p; the host Sampler's rule, see sample.cuh). The decode step
// draws inside its finish kernel (grid_sample, or block_sample with one block); this launcher serves the tests and benchmarks.
#pragma once
#include <cstdint>

#include "cuda/common/launch.h"

namespace mk::cuda {

// grid_sample's scratch (sample.cuh). part, kept: [blocks] per-block weight sums and largest kept ids; counter: 0
// before a draw (the draw resets it).
struct GridSampleScratch {
  double* part = nullptr;
  int* kept = nullptr;
  unsigned* counter = nullptr;
};

// *out = the id the host Sampler draws from logits[n_vocab] (device, f32) with temperature T > 0 and min_p, draw
// `draw` of `seed` (-1 when no logit is finite). blocks = 1: block_sample, one block of 1024 threads; more (at most
// 1024): grid_sample over that many blocks (its scratch allocated and freed on the stream).
void sample_token(const Stream& s, const float* logits, int n_vocab, float T, float min_p, uint64_t seed, uint64_t draw,
                  int32_t* out, int blocks = 1);

}  // namespace mk::cuda
