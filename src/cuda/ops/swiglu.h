// SwiGLU over rows (prefill): out[t, i] = bf16(silu(gu[t, 2i]) * gu[t, 2i + 1]), where gu is the output of the fused
// gate/up projection whose rows are interleaved (gate_i, up_i). (Decode fuses this into the matvec: matvec.h.)
// CPU reference: cpu::swiglu. Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include "cuda/common/launch.h"

namespace mk::cuda {

// out: [n_rows, n_ff] bf16; gu: [n_rows, 2 * n_ff] f32 interleaved.
void swiglu(const Stream& s, __nv_bfloat16* out, const float* gu, int n_ff, int n_rows);

}  // namespace mk::cuda
