// Bias + q/k norm + RoPE + KV-cache write after the QKV projection (see rope.h).
#include "cuda/ops/rope.h"

#include "cuda/common/rope_head.cuh"

namespace mk::cuda {
namespace {

constexpr int WARPS = 4;

__global__ void __launch_bounds__(WARPS * 32) rope_qkv_kernel(RopeQkvArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x;
  const int head = blockIdx.y * WARPS + (threadIdx.x >> 5);
  const int n_heads = a.n_head + 2 * a.n_kv_head;
  if (head >= n_heads) return;
  const int D = a.head_dim;
  const int q_dim = a.n_head * D, kv_dim = a.n_kv_head * D;
  const int row = q_dim + 2 * kv_dim;
  const int col0 = head * D;  // q heads, then k heads, then v heads
  const int pos = *a.pos0 + t;
  const bool is_q = head < a.n_head, is_k = !is_q && head < a.n_head + a.n_kv_head;
  float x0[ROPE_MAX_PAIRS_PER_LANE], x1[ROPE_MAX_PAIRS_PER_LANE];
  rope_head_warp(a.qkv + size_t(t) * size_t(row) + col0, a.bias ? a.bias + col0 : nullptr, a.pair_rows,
                 is_q ? a.q_norm : (is_k ? a.k_norm : nullptr), a.eps, is_q || is_k, a.inv_freq, pos, D, lane, x0, x1);
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
  rope_head_store(dst, x0, x1, D, lane);
}

}  // namespace

void rope_qkv(const Stream& s, const RopeQkvArgs& a) {
  MK_CHECK(a.qkv && a.inv_freq && a.pos0 && a.q_out && a.kv.k && a.kv.v && a.block_table);
  MK_CHECK(a.head_dim % 2 == 0 && a.head_dim <= 2 * 32 * ROPE_MAX_PAIRS_PER_LANE && a.n_tokens > 0);
  MK_CHECK(a.kv.n_kv_head == a.n_kv_head && a.kv.head_dim == a.head_dim && a.kv.kv_block_size > 0);
  int n_heads = a.n_head + 2 * a.n_kv_head;
  launch(s, dim3(a.n_tokens, (n_heads + WARPS - 1) / WARPS), dim3(WARPS * 32), 0, rope_qkv_kernel, a);
}

}  // namespace mk::cuda
