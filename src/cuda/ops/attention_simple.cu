// Simple paged attention (see attention_simple.h).
#include "cuda/ops/attention_simple.h"

#include <cmath>

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

constexpr int WARPS = 4;
constexpr int MAX_D_PER_LANE = 8;  // head_dim <= 256

__global__ void __launch_bounds__(WARPS * 32) attention_simple_kernel(bf16* out, const bf16* q, KvCacheView kv,
                                                                      const int32_t* block_table,
                                                                      const int32_t* seq_len_k, int n_tokens,
                                                                      int n_head, float scale) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x, h = blockIdx.y * WARPS + (threadIdx.x >> 5);
  if (h >= n_head) return;
  const int D = kv.head_dim, per = D / 32;
  const int kvh = h / (n_head / kv.n_kv_head);
  const int q_pos = *seq_len_k - n_tokens + t;
  const bf16* qr = q + (size_t(t) * n_head + h) * D;
  float qv[MAX_D_PER_LANE], acc[MAX_D_PER_LANE];
#pragma unroll
  for (int j = 0; j < MAX_D_PER_LANE; ++j) {
    qv[j] = j < per ? __bfloat162float(qr[lane * per + j]) * scale : 0.f;
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int p = 0; p <= q_pos; ++p) {
    size_t row = (size_t(block_table[p / kv.kv_block_size]) * kv.kv_block_size + p % kv.kv_block_size) *
                     kv.n_kv_head + kvh;
    const bf16* kr = kv.k + row * D + lane * per;
    const bf16* vr = kv.v + row * D + lane * per;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < MAX_D_PER_LANE; ++j)
      if (j < per) dot += qv[j] * __bfloat162float(kr[j]);
    dot = warp_sum(dot);
    float m_new = fmaxf(m, dot);
    float corr = __expf(m - m_new), pexp = __expf(dot - m_new);
    l = l * corr + pexp;
#pragma unroll
    for (int j = 0; j < MAX_D_PER_LANE; ++j)
      if (j < per) acc[j] = acc[j] * corr + pexp * __bfloat162float(vr[j]);
    m = m_new;
  }
  bf16* o = out + (size_t(t) * n_head + h) * D + lane * per;
  float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int j = 0; j < MAX_D_PER_LANE; ++j)
    if (j < per) o[j] = __float2bfloat16(acc[j] * inv);
}

}  // namespace

void attention_simple(const Stream& s, bf16* out, const bf16* q, const KvCacheView& kv, const int32_t* block_table,
                      const int32_t* seq_len_k, int n_tokens, int n_head, float scale) {
  MK_CHECK(kv.head_dim % 32 == 0 && kv.head_dim <= 32 * MAX_D_PER_LANE && n_head % kv.n_kv_head == 0);
  if (scale == 0.f) scale = 1.f / std::sqrt(float(kv.head_dim));
  launch(s, dim3(n_tokens, (n_head + WARPS - 1) / WARPS), dim3(WARPS * 32), 0, attention_simple_kernel, out, q, kv,
         block_table, seq_len_k, n_tokens, n_head, scale);
}

}  // namespace mk::cuda
