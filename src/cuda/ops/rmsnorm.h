// RMSNorm over rows (prefill): out[t, i] = bf16(w[i] * x[t, i] / sqrt(mean(x[t]^2) + eps)). The bf16 output feeds
// the cuBLASLt projections. (Decode folds RMSNorm into the following matvec instead: matvec.h, norm_w.)
// CPU reference: cpu::rmsnorm. Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include "cuda/common/launch.h"

namespace mk::cuda {

// out: [n_rows, n] bf16; x: [n_rows, n] f32 (row stride x_stride elements); w: [n] f32.
void rmsnorm(const Stream& s, __nv_bfloat16* out, const float* x, const float* w, float eps, int n, int n_rows,
             int x_stride);

}  // namespace mk::cuda
