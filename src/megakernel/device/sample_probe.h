// The megakernel's draw (device/ops/sample.cuh) run alone on synthetic logits, for tests and timing: the SamplePartial
// stage as one launch of one block per range (blocks of the megakernel's shape: device::WARPS consumer warps; the
// loader warp returns at once), then Argmax's pick on one block for n_draws draws with draw indices sp.first_draw,
// sp.first_draw + 1, ...; the logits as counters (plain floats) or flags ((value, epoch) pairs) hand them over; the
// max hint as the LM-head slices' amax records give it (NaN the largest, then +inf, then the finite max).
// Test: tests/gpu/test_megakernel_sample.cu.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "megakernel/isa.h"

namespace mk::megakernel {

struct DrawProbe {
  std::vector<int32_t> ids;  // [n_draws], -1: no finite logit
  int n_parts = 0;           // ranges (blocks of the partial launch)
  double partial_us = 0;     // the ranges' launch (CUDA events)
  double pick_us = 0;        // one draw of the pick launch (n_draws in one launch)
  uint32_t error = 0;        // the draw's error word (a poll that timed out: nonzero)
};

// part_tiles: SAMPLE_TILEs per range (the schedule's Layout::sample_part_tiles).
Expected<DrawProbe> draw_probe(std::span<const float> logits, const SampleParams& sp, int n_draws, bool flags,
                               int part_tiles);

}  // namespace mk::megakernel
