// Ceilings measured in the same process as the benchmark (DESIGN.md, "Performance method"):
// the read-bandwidth ceiling (a read-only kernel over several GiB, as /work/shared/peers/ceilings.py),
// the bf16 matrix rate (cuBLASLt 8192^3), and the decode matvec's achieved bandwidth on given shapes.
// All figures: medians over repeats timed with CUDA events after warm-up.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/common/read_ceiling.h"  // measure_read_ceiling

namespace mk::cuda {

struct MatmulRate {
  double tflops = 0;  // median over repeats
  double ms = 0;
};
Expected<MatmulRate> measure_matmul_rate(int n = 8192, int repeats = 20);

struct MatvecRate {
  int n_rows = 0, n_cols = 0;
  double us_single = 0;   // one launch, cold weights, events around it (median)
  double us_chained = 0;  // per matvec inside a CUDA graph of back-to-back launches with PDL, cold weights
  double tbps_single = 0, tbps_chained = 0;
  // With `trace` (split-K and read only): where the chained graph's time goes, medians over its middle launches in
  // us: the period, from the previous launch's last block end to the first block past its wait (and x staged), the
  // spread of those, to the median block end, the last tenth of the block ends, and how many blocks were resident
  // before the previous launch ended (and how long before).
  std::string timeline;
};
// Rotates over enough copies of the matrix to defeat the L2.
// kernel: "splitk" (ops/matvec.cu), "splitk-early" (the same with MatvecArgs::trigger_at_start, as the decode
// step's QKV, O and down projections) or "rowpair" (ops/matvec_rowpair.cu); "read": no matvec, a read-only kernel
// over the same bytes in the same chain (what any kernel can stream at that size there). A "+bf16x" suffix gives
// the matvec a bf16 x (as the down projection's), f32 otherwise. Any other name: an error naming the known ones.
Expected<MatvecRate> measure_matvec(int n_rows, int n_cols, int repeats = 20, const char* kernel = "splitk",
                                    bool trace = false);

}  // namespace mk::cuda
