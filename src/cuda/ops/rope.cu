// Bias + q/k norm + RoPE + KV-cache write after the QKV projection (see rope.h).
#include "cuda/ops/rope.h"

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

constexpr int WARPS = 4;
constexpr int MAX_PAIRS_PER_LANE = 4;  // head_dim <= 256

__global__ void __launch_bounds__(WARPS * 32) rope_qkv_kernel(RopeQkvArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x;
  const int head = blockIdx.y * WARPS + (threadIdx.x >> 5);
  const int n_heads = a.n_head + 2 * a.n_kv_head;
  if (head >= n_heads) return;
  const int D = a.head_dim, half = D / 2;
  const int q_dim = a.n_head * D, kv_dim = a.n_kv_head * D;
  const int row = q_dim + 2 * kv_dim;
  const int col0 = head * D;  // q heads, then k heads, then v heads
  const float* src = a.qkv + size_t(t) * size_t(row) + col0;
  const int pos = *a.pos0 + t;

  float x0[MAX_PAIRS_PER_LANE], x1[MAX_PAIRS_PER_LANE];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < MAX_PAIRS_PER_LANE; ++j) {
    int i = lane + 32 * j;
    x0[j] = x1[j] = 0.f;
    if (i < half) {
      const int c0 = a.pair_rows ? 2 * i : i, c1 = a.pair_rows ? 2 * i + 1 : i + half;
      x0[j] = src[c0];
      x1[j] = src[c1];
      if (a.bias) {
        x0[j] += a.bias[col0 + c0];
        x1[j] += a.bias[col0 + c1];
      }
      ss += x0[j] * x0[j] + x1[j] * x1[j];
    }
  }
  const bool is_q = head < a.n_head, is_k = !is_q && head < a.n_head + a.n_kv_head;
  const float* nw = is_q ? a.q_norm : (is_k ? a.k_norm : nullptr);
  if (nw) {
    float inv = rsqrtf(warp_sum(ss) / float(D) + a.eps);
#pragma unroll
    for (int j = 0; j < MAX_PAIRS_PER_LANE; ++j) {
      int i = lane + 32 * j;
      if (i < half) {
        x0[j] = x0[j] * inv * nw[i];
        x1[j] = x1[j] * inv * nw[i + half];
      }
    }
  }
  if (is_q || is_k) {
#pragma unroll
    for (int j = 0; j < MAX_PAIRS_PER_LANE; ++j) {
      int i = lane + 32 * j;
      if (i < half) {
        float s, c;
        sincosf(float(pos) * a.inv_freq[i], &s, &c);
        float r0 = x0[j] * c - x1[j] * s, r1 = x1[j] * c + x0[j] * s;
        x0[j] = r0;
        x1[j] = r1;
      }
    }
  }
  bf16* dst;
  if (is_q) {
    dst = a.q_out + size_t(t) * size_t(q_dim) + size_t(head) * D;
  } else {
    if (pos >= a.max_positions) return;
    int kvh = is_k ? head - a.n_head : head - a.n_head - a.n_kv_head;
    int blk = a.block_table[pos / a.kv.kv_block_size];
    int r = pos % a.kv.kv_block_size;
    bf16* pool = is_k ? a.kv.k : a.kv.v;
    dst = pool + ((size_t(blk) * a.kv.kv_block_size + r) * a.kv.n_kv_head + kvh) * size_t(D);
  }
#pragma unroll
  for (int j = 0; j < MAX_PAIRS_PER_LANE; ++j) {
    int i = lane + 32 * j;
    if (i < half) {
      dst[i] = __float2bfloat16(x0[j]);
      dst[i + half] = __float2bfloat16(x1[j]);
    }
  }
}

}  // namespace

void rope_qkv(const Stream& s, const RopeQkvArgs& a) {
  MK_CHECK(a.qkv && a.inv_freq && a.pos0 && a.q_out && a.kv.k && a.kv.v && a.block_table);
  MK_CHECK(a.head_dim % 2 == 0 && a.head_dim <= 2 * 32 * MAX_PAIRS_PER_LANE && a.n_tokens > 0);
  MK_CHECK(a.kv.n_kv_head == a.n_kv_head && a.kv.head_dim == a.head_dim && a.kv.kv_block_size > 0);
  int n_heads = a.n_head + 2 * a.n_kv_head;
  launch(s, dim3(a.n_tokens, (n_heads + WARPS - 1) / WARPS), dim3(WARPS * 32), 0, rope_qkv_kernel, a);
}

}  // namespace mk::cuda
