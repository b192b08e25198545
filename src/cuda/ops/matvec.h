// Matrix-vector product for batch-1 decode: y = W x with W bf16 [n_rows, n_cols] (row-major, HF layout), x f32
// or bf16, fp32 accumulation. Bandwidth-bound: each lane streams 16-byte weight loads, 16 in flight, and the
// first batch of weights is loaded before waiting on the producer of x (programmatic dependent launch), so
// weight traffic overlaps the previous kernel's tail.
// Fusions (all optional): RMSNorm of x folded into the load of x (norm_w), bias, residual add into out,
// SwiGLU of interleaved (gate, up) row pairs, argmax over the outputs (LM head).
// CPU reference: cpu::matvec (+ cpu::rmsnorm, cpu::swiglu, cpu::add, cpu::argmax). Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/launch.h"

namespace mk::cuda {

using bf16 = __nv_bfloat16;

enum class MatvecOut : uint8_t {
  STORE,     // out[r] = y[r]
  ADD,       // out[r] += y[r]            (residual add)
  SWIGLU,    // out[i] = silu(y[2i]) * y[2i+1], out: [n_rows / 2]  (rows interleaved gate, up)
};

struct MatvecArgs {
  const bf16* w = nullptr;      // [n_rows, n_cols], 16-byte aligned
  int n_rows = 0;               // any; even for SWIGLU
  int n_cols = 0;               // multiple of 8
  const float* x = nullptr;     // [n_cols]  (exactly one of x, x_bf16)
  const bf16* x_bf16 = nullptr; // [n_cols]
  const float* norm_w = nullptr;  // [n_cols] or null: x is replaced by rmsnorm(x) * norm_w
  float eps = 1e-6f;
  const float* bias = nullptr;  // [n_rows] or null
  float* out = nullptr;         // see MatvecOut
  MatvecOut mode = MatvecOut::STORE;
  // Argmax over y (STORE mode only): atomicMax of argmax_pack(y, r) into *argmax; the caller resets it to 0.
  unsigned long long* argmax = nullptr;
};

void matvec(const Stream& s, const MatvecArgs& a);

#ifdef __CUDACC__
#define MK_HOST_DEVICE __host__ __device__
#else
#define MK_HOST_DEVICE
#endif

// Decodes a packed argmax word (see matvec.cu): the row index.
MK_HOST_DEVICE inline int32_t argmax_unpack(unsigned long long packed) { return int32_t(0xffffffffu - uint32_t(packed & 0xffffffffu)); }

}  // namespace mk::cuda
