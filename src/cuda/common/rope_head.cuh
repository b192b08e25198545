// One head of one token after the QKV projection, by one warp: bias add (Qwen2), per-head RMSNorm (Qwen3), RoPE
// (HF rotate_half). The RoPE kernel (ops/rope.cu) and the decode attention that applies RoPE itself
// (attention/decode_kernel.cuh, AttentionDecodeArgs::rope) both call it, so they produce the same bits.
// CPU reference: cpu::rmsnorm (per head) + cpu::rope.
#pragma once
#include "cuda/common/device.cuh"

namespace mk::cuda {

constexpr int ROPE_MAX_PAIRS_PER_LANE = 4;  // head_dim <= 256

// Lane `lane` gets dims i (x0[j]) and i + D / 2 (x1[j]) of the head, i = lane + 32 j < D / 2 (0 elsewhere).
//   src   the head's D raw values (f32); pair_rows: stored in rope-pair order (dims i, i + D/2 at 2i, 2i + 1)
//   bias  the head's D bias values in the same order as src, or null
//   norm  [D] RMSNorm weights in HF dim order, or null (no norm); eps its epsilon
//   rotate  apply RoPE at position pos with inv_freq [D / 2] (q and k heads; not v)
__device__ __forceinline__ void rope_head_warp(const float* src, const float* bias, bool pair_rows, const float* norm,
                                               float eps, bool rotate, const float* inv_freq, int pos, int D, int lane,
                                               float (&x0)[ROPE_MAX_PAIRS_PER_LANE],
                                               float (&x1)[ROPE_MAX_PAIRS_PER_LANE]) {
  const int half = D / 2;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < ROPE_MAX_PAIRS_PER_LANE; ++j) {
    const int i = lane + 32 * j;
    x0[j] = x1[j] = 0.f;
    if (i < half) {
      const int c0 = pair_rows ? 2 * i : i, c1 = pair_rows ? 2 * i + 1 : i + half;
      x0[j] = src[c0];
      x1[j] = src[c1];
      if (bias) {
        x0[j] += bias[c0];
        x1[j] += bias[c1];
      }
      ss += x0[j] * x0[j] + x1[j] * x1[j];
    }
  }
  if (norm) {
    const float inv = rsqrtf(warp_sum(ss) / float(D) + eps);
#pragma unroll
    for (int j = 0; j < ROPE_MAX_PAIRS_PER_LANE; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        x0[j] = x0[j] * inv * norm[i];
        x1[j] = x1[j] * inv * norm[i + half];
      }
    }
  }
  if (rotate) {
#pragma unroll
    for (int j = 0; j < ROPE_MAX_PAIRS_PER_LANE; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        float s, c;
        sincosf(float(pos) * inv_freq[i], &s, &c);
        const float r0 = x0[j] * c - x1[j] * s, r1 = x1[j] * c + x0[j] * s;
        x0[j] = r0;
        x1[j] = r1;
      }
    }
  }
}

// dst[0, D): the head in HF dim order, rounded to bf16.
__device__ __forceinline__ void rope_head_store(__nv_bfloat16* dst, const float (&x0)[ROPE_MAX_PAIRS_PER_LANE],
                                                const float (&x1)[ROPE_MAX_PAIRS_PER_LANE], int D, int lane) {
#pragma unroll
  for (int j = 0; j < ROPE_MAX_PAIRS_PER_LANE; ++j) {
    const int i = lane + 32 * j;
    if (i < D / 2) {
      dst[i] = __float2bfloat16(x0[j]);
      dst[i + D / 2] = __float2bfloat16(x1[j]);
    }
  }
}

}  // namespace mk::cuda
