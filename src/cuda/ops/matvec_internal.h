// Shared by the two matvec kernels (matvec.cu: split-K, the default; matvec_rowpair.cu: the first version).
#pragma once
#include "cuda/common/device.cuh"
#include "cuda/ops/matvec.h"

namespace mk::cuda {

// Order-preserving float -> uint32 (larger float, larger key); NaN largest, as torch.argmax.
__device__ __forceinline__ uint32_t float_key(float v) {
  if (v != v) return 0xffffffffu;
  uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Ties: the smaller index wins, so the low word holds the complemented index (argmax_unpack in matvec.h).
__device__ __forceinline__ unsigned long long argmax_pack(float v, int r) {
  return (static_cast<unsigned long long>(float_key(v)) << 32) | (0xffffffffu - uint32_t(r));
}

void matvec_rowpair(const Stream& s, const MatvecArgs& a);
void matvec_splitk(const Stream& s, const MatvecArgs& a);

}  // namespace mk::cuda
