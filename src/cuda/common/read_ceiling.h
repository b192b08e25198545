// The GPU's read-bandwidth ceiling, measured in the same process as a benchmark (DESIGN.md, "Performance
// method"; as /work/shared/peers/ceilings.py): read-only grid-stride kernels over a buffer far larger than the
// L2, several launch shapes, median of `repeats` event-timed launches each; the best shape is the ceiling.
// Used by `megakernel bench`, bench/megakernel_decode and bench/attention.
#pragma once
#include <string>

#include "core/status.h"

namespace mk::cuda {

struct ReadCeiling {
  double tbps = 0;          // 1e12 bytes read per second: best launch shape, median
  std::string best_shape;   // e.g. "gridstride8 512x4/SM"
  double bytes = 0;
};
Expected<ReadCeiling> measure_read_ceiling(double gib = 4.0, int repeats = 20);

}  // namespace mk::cuda
