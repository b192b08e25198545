// Read-bandwidth ceiling for the attention benchmark, measured in the same process (DESIGN.md, "Performance
// method"): a read-only streaming kernel over a buffer far larger than the L2, best of two launch shapes,
// median of `repeats` event-timed runs. Decode attention is judged against it (bench/attention.cpp decode).
#pragma once
#include <cstddef>

#include "core/status.h"

namespace mk::cuda {

// Returns TB/s (1e12 bytes per second) of bytes read.
Expected<double> measure_read_tbps(size_t bytes = size_t(4) << 30, int repeats = 15);

}  // namespace mk::cuda
