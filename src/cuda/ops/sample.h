// On-device sampling of one token (temperature + min-p; the host Sampler's rule, see sample.cuh). The decode step
// calls block_sample inside its finish kernel; this launcher serves the tests and benchmarks.
#pragma once
#include <cstdint>

#include "cuda/common/launch.h"

namespace mk::cuda {

// *out = the id the host Sampler draws from logits[n_vocab] (device, f32) with temperature T > 0 and min_p, draw
// `draw` of `seed` (-1 when no logit is finite). One block of 1024 threads.
void sample_token(const Stream& s, const float* logits, int n_vocab, float T, float min_p, uint64_t seed, uint64_t draw,
                  int32_t* out);

}  // namespace mk::cuda
