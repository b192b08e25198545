// The megakernel's part of `megakernel bench`: batch-1 greedy decode of the persistent-kernel backend at given
// context lengths, one step per launch and all steps in one launch, timed with CUDA events in the same process
// (and against the same read ceiling) as the layered path.
#pragma once
#ifdef MK_HAVE_CUDA
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "megakernel/model.h"

namespace mk::cli {

struct MegakernelBenchArgs {
  std::vector<int> contexts;  // cached positions before the first timed token (<= 1024: a real prompt)
  int n_tokens = 128;         // decoded tokens per repeat
  int repeats = 5;
  double weight_bytes = 0;    // weight bytes read per token
  double read_tbps = 0;       // ceiling measured in the same process
  FILE* out = stdout;         // table for people
  const Model* model = nullptr;  // the checkpoint's weights; null: random weights of the config's shapes
};

// Appends one entry per (context, steps per launch) to `decode` (same fields as the layered rows, plus
// "backend" and "steps_per_launch"). A model the megakernel refuses gives an entry with "refused": reason.
Status bench_megakernel(const ModelConfig& c, const MegakernelBenchArgs& a, nlohmann::json& decode);

}  // namespace mk::cli
#endif
