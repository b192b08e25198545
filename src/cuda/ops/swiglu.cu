// SwiGLU over rows (see swiglu.h): grid-stride over all elements, 2 outputs per thread-step.
#include "cuda/ops/swiglu.h"

#include <algorithm>

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

__global__ void swiglu_kernel(bf16* out, const float* gu, size_t n_pairs) {
  pdl_wait();
  pdl_launch_dependents();
  // gu viewed as float4 = (gate_i, up_i, gate_i+1, up_i+1): n_ff is even, so pairs never straddle rows.
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_pairs; i += size_t(gridDim.x) * blockDim.x) {
    float4 v = reinterpret_cast<const float4*>(gu)[i];
    float a = v.x / (1.f + __expf(-v.x)) * v.y;
    float b = v.z / (1.f + __expf(-v.z)) * v.w;
    reinterpret_cast<__nv_bfloat162*>(out)[i] = __floats2bfloat162_rn(a, b);
  }
}

}  // namespace

void swiglu(const Stream& s, bf16* out, const float* gu, int n_ff, int n_rows) {
  MK_CHECK(n_ff % 2 == 0 && n_rows > 0);
  size_t n_pairs = size_t(n_rows) * size_t(n_ff) / 2;
  int blocks = int(std::min<size_t>((n_pairs + 255) / 256, 132 * 8));
  launch(s, dim3(blocks), dim3(256), 0, swiglu_kernel, out, gu, n_pairs);
}

}  // namespace mk::cuda
