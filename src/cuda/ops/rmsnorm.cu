// RMSNorm over rows (see rmsnorm.h): one block per row.
#include "cuda/ops/rmsnorm.h"

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

__global__ void rmsnorm_kernel(bf16* out, const float* x, const float* w, float eps, int n, int x_stride) {
  __shared__ float s_red[32];
  pdl_wait();
  pdl_launch_dependents();
  const float* xr = x + size_t(blockIdx.x) * size_t(x_stride);
  bf16* o = out + size_t(blockIdx.x) * size_t(n);
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  float inv = rsqrtf(block_sum(ss, s_red) / float(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = __float2bfloat16(xr[i] * inv * w[i]);
}

}  // namespace

void rmsnorm(const Stream& s, bf16* out, const float* x, const float* w, float eps, int n, int n_rows, int x_stride) {
  MK_CHECK(n > 0 && n_rows > 0);
  launch(s, dim3(n_rows), dim3(256), 0, rmsnorm_kernel, out, x, w, eps, n, x_stride);
}

}  // namespace mk::cuda
