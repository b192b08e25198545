// The megakernel's draw (device/ops/sample.cuh sample_token) run alone on synthetic logits, for tests and timing:
// one block of the megakernel's shape (device::WARPS consumer warps; the loader warp returns at once) draws n_draws tokens with draw
// indices sp.first_draw, sp.first_draw + 1, ... from `logits`, as counters (plain floats) or flags ((value, epoch)
// pairs) would hand them to it; the max hint as the LM-head slices' amax records give it (NaN the largest, then
// +inf, then the finite max). Test: tests/gpu/test_megakernel_sample.cu.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "megakernel/isa.h"

namespace mk::megakernel {

struct DrawProbe {
  std::vector<int32_t> ids;  // [n_draws], -1: no finite logit
  double us_per_draw = 0;    // one launch of n_draws draws, CUDA events
  uint32_t error = 0;        // the draw's error word (a poll that timed out: nonzero)
};

// x_floats: the s_x floats the draw may use for its block records (the megakernel gives it smem_x_floats).
Expected<DrawProbe> draw_probe(std::span<const float> logits, const SampleParams& sp, int n_draws, bool flags,
                               int x_floats);

}  // namespace mk::megakernel
