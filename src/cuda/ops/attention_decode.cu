// Split-KV decode attention with the split reduction in the same kernel (see attention_decode.h).
// CTA = (split, kv head), 128 threads: D/8 threads per key row (8 dims each), 128 / (D/8) rows side by side,
// U rows per thread group in flight; the GC (>= group) query heads of the kv head share every K/V load. Online
// softmax in log2 units per thread group, groups combined in shared memory into a partial (acc, max, sum) per
// (head, split). Only the splits that hold keys take part (a short context: one CTA per kv head, which writes
// the output directly). Each CTA then counts its arrival; the last CTA of the kv head reads all splits'
// partials back (fence + atomic, as in CUDA's threadFenceReduction sample), writes the normalised output and
// resets the counter for the next launch. Deterministic: the combine order is fixed (split 0, 1, ...).
#include "cuda/ops/attention_decode.h"

#include <algorithm>
#include <cmath>

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

constexpr int THREADS = 128;
constexpr int U = 4;           // key rows per thread group in flight per step
constexpr int MIN_CHUNK = 64;  // keys per split at least: a short context is handled by few CTAs
constexpr int MAX_SPLIT = 64;
constexpr int MAX_GROUP = 8;
constexpr float LOG2E = 1.4426950408889634f;

struct Params {
  DecodeAttentionArgs a;
  float scale_log2;
  float* part;         // [n_head, n_split, D]: sum_k p_k v_k, p relative to the split's max
  float* part_ml;      // [n_head, n_split, 2]: (max, sum p) in log2 units
  unsigned* arrivals;  // [n_kv_head]
  int group;           // query heads per kv head
};

__device__ __forceinline__ void bf16x8(const uint4& v, float* f) { unpack8(v, f); }

template <int D, int GC>
__global__ void __launch_bounds__(THREADS) decode_attention_kernel(const Params p) {
  constexpr int TPR = D / 8, NG = THREADS / TPR;
  __shared__ float s_acc[NG][GC][D];
  __shared__ float s_m[NG][GC], s_l[NG][GC];
  __shared__ float s_w[GC][MAX_SPLIT];
  __shared__ int s_last;
  const DecodeAttentionArgs& a = p.a;
  const int split = blockIdx.x, hk = blockIdx.y, G = p.group, h0 = hk * G, n_split = a.n_split;
  const int grp = threadIdx.x / TPR, li = threadIdx.x % TPR;
  pdl_launch_dependents();  // the O projection may launch and stream its weights while we run
  pdl_wait();               // q and this token's K/V come from the previous kernel

  const int kv_len = min(*a.seq_len, a.max_positions);
  const int chunk = max((kv_len + n_split - 1) / n_split, MIN_CHUNK);
  // Splits that hold keys (the same for every CTA); the others leave at once and are not counted.
  const int n_active = max(1, min(n_split, (kv_len + chunk - 1) / chunk));
  if (split >= n_active) return;
  const int k_begin = split * chunk, k_end = min(kv_len, k_begin + chunk);

  float q[GC][8], acc[GC][8], m[GC], l[GC];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    if (i < G) {
      bf16x8(*reinterpret_cast<const uint4*>(a.q + size_t(h0 + i) * D + li * 8), q[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[i][e] *= p.scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[i][e] = 0.f;
    }
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] = 0.f;
  }

  const int bs = a.kv.kv_block_size, nkv = a.kv.n_kv_head;
  // Trip count uniform over the block (groups of a warp shuffle together); keys past k_end are masked.
  for (int base = k_begin; base < k_end; base += NG * U) {
    const int key0 = base + grp * U;
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int pos = key0 + u;
      if (pos < k_end) {
        const size_t off = ((size_t(a.block_table[pos / bs]) * bs + pos % bs) * nkv + hk) * D + li * 8;
        kr[u] = __ldg(reinterpret_cast<const uint4*>(a.kv.k + off));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(a.kv.v + off));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[U][GC];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      bf16x8(kr[u], kf);
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(q[i][e], kf[e], d);
#pragma unroll
        for (int o = TPR / 2; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[u][i] = key0 + u < k_end ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int i = 0; i < GC; ++i) {
      float mx = m[i];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][i]);
      const float alpha = mx == -INFINITY ? 1.f : exp2f(m[i] - mx);
      const float m_use = mx == -INFINITY ? 0.f : mx;
      m[i] = mx;
      l[i] *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float pu = exp2f(s[u][i] - m_use);
        l[i] += pu;
        float vf[8];
        bf16x8(vr[u], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(pu, vf[e], acc[i][e]);
      }
    }
  }

  // Combine the thread groups of this CTA into the (head, split) partial.
#pragma unroll
  for (int i = 0; i < GC; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_acc[grp][i][li * 8 + e] = acc[i][e];
    if (li == 0) {
      s_m[grp][i] = m[i];
      s_l[grp][i] = l[i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += THREADS) {
    const int i = idx / D, d = idx % D;
    float mx = -INFINITY;
    for (int g = 0; g < NG; ++g) mx = fmaxf(mx, s_m[g][i]);
    float lsum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
      for (int g = 0; g < NG; ++g) {
        const float w = exp2f(s_m[g][i] - mx);
        lsum += s_l[g][i] * w;
        o += s_acc[g][i][d] * w;
      }
    }
    if (n_active == 1) {  // the only split: this is the output (no partials, no counting)
      a.out[size_t(h0 + i) * D + d] = __float2bfloat16(lsum > 0.f ? o / lsum : 0.f);
      continue;
    }
    const size_t row = size_t(h0 + i) * n_split + split;
    p.part[row * D + d] = o;
    if (d == 0) {
      p.part_ml[row * 2] = mx;
      p.part_ml[row * 2 + 1] = lsum;
    }
  }
  if (n_active == 1) return;
  __threadfence();  // our partial is visible device-wide before we count ourselves in
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&p.arrivals[hk], 1u) == unsigned(n_active - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();  // the other CTAs' partials (they fenced before their arrivals)

  // Last CTA of the kv head: warp i handles head i's weights 2^(m_s - M) / L (lane = split, all loads in
  // flight at once), then every output sums its splits with all loads issued before the first use.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = warp; i < G; i += THREADS / 32) {
    const float* ml = p.part_ml + size_t(h0 + i) * n_split * 2;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // splits lane and lane + 32
    if (lane < n_active) m0 = __ldcg(ml + 2 * lane), l0 = __ldcg(ml + 2 * lane + 1);
    if (lane + 32 < n_active) m1 = __ldcg(ml + 2 * (lane + 32)), l1 = __ldcg(ml + 2 * (lane + 32) + 1);
    const float mx = warp_max(fmaxf(m0, m1));
    const float w0 = m0 == -INFINITY ? 0.f : exp2f(m0 - mx), w1 = m1 == -INFINITY ? 0.f : exp2f(m1 - mx);
    const float lsum = warp_sum(w0 * l0 + w1 * l1);
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    if (lane < n_active) s_w[i][lane] = w0 * inv;
    if (lane + 32 < n_active) s_w[i][lane + 32] = w1 * inv;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += THREADS) {
    const int i = idx / D, d = idx % D;
    const float* src = p.part + size_t(h0 + i) * n_split * D + d;
    float v[MAX_SPLIT];
#pragma unroll
    for (int sp = 0; sp < MAX_SPLIT; ++sp) v[sp] = sp < n_active ? __ldcg(src + size_t(sp) * D) : 0.f;
    float o = 0.f;
#pragma unroll
    for (int sp = 0; sp < MAX_SPLIT; ++sp)
      if (sp < n_active) o = fmaf(s_w[i][sp], v[sp], o);
    a.out[size_t(h0 + i) * D + d] = __float2bfloat16(o);
  }
  if (threadIdx.x == 0) p.arrivals[hk] = 0;  // every active CTA of this launch has arrived: ready for the next
}

size_t part_floats(int n_head, int head_dim, int n_split) { return size_t(n_head) * n_split * (head_dim + 2); }

template <int D>
void launch_d(const Stream& s, const Params& p) {
  const dim3 grid(p.a.n_split, p.a.kv.n_kv_head);
  if (p.group == 1) launch(s, grid, dim3(THREADS), 0, decode_attention_kernel<D, 1>, p);
  else if (p.group == 2) launch(s, grid, dim3(THREADS), 0, decode_attention_kernel<D, 2>, p);
  else if (p.group <= 4) launch(s, grid, dim3(THREADS), 0, decode_attention_kernel<D, 4>, p);
  else launch(s, grid, dim3(THREADS), 0, decode_attention_kernel<D, 8>, p);
}

}  // namespace

bool decode_attention_supported(int n_head, int n_kv_head, int head_dim) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0 &&
         n_head / n_kv_head <= MAX_GROUP;
}

int decode_attention_splits(int n_kv_head, int max_positions) {
  static const int sms = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  const int by_sms = std::max(1, 2 * sms / std::max(1, n_kv_head));
  const int by_len = std::max(1, (max_positions + MIN_CHUNK - 1) / MIN_CHUNK);
  return std::min({by_sms, by_len, MAX_SPLIT});
}

size_t decode_attention_workspace_bytes(int n_head, int n_kv_head, int head_dim, int n_split) {
  return part_floats(n_head, head_dim, n_split) * sizeof(float) + size_t(n_kv_head) * sizeof(unsigned);
}

void decode_attention(const Stream& s, const DecodeAttentionArgs& a) {
  const int D = a.kv.head_dim;
  MK_CHECK(decode_attention_supported(a.n_head, a.kv.n_kv_head, D));
  MK_CHECK(a.out && a.q && a.kv.k && a.kv.v && a.block_table && a.seq_len && a.workspace);
  MK_CHECK(a.n_split >= 1 && a.n_split <= MAX_SPLIT && a.max_positions > 0);
  Params p;
  p.a = a;
  p.scale_log2 = (a.scale != 0.f ? a.scale : 1.f / std::sqrt(float(D))) * LOG2E;
  p.part = static_cast<float*>(a.workspace);
  p.part_ml = p.part + size_t(a.n_head) * a.n_split * D;
  p.arrivals = reinterpret_cast<unsigned*>(p.part_ml + size_t(a.n_head) * a.n_split * 2);
  p.group = a.n_head / a.kv.n_kv_head;
  if (D == 64) launch_d<64>(s, p);
  else launch_d<128>(s, p);
}

}  // namespace mk::cuda
