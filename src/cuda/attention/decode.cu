// Split-KV decode attention (flash-decoding) over the paged cache: one query token per sequence.
// Kernel 1: CTA (split, kv head [x head chunk], sequence) streams its key range once, 16-byte loads, D/8 threads
// per key row, U rows in flight per thread; the <= 8 query heads of the chunk share every K/V load. Each thread
// group keeps an online softmax; the CTA combines its groups in shared memory and writes a partial (O, LSE).
// Kernel 2: combines the splits per (sequence, head). Reference: cpu::attention_prefill with q_len = 1.
#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"

namespace mk::cuda::attn {
namespace {

constexpr int DEC_THREADS = 128;
constexpr int DEC_U = 4;  // key rows per thread group in flight per step

__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// GC: compile-time cap on the query heads handled per CTA (the kv head's group, or a chunk of it).
template <int D, int GC>
__global__ void __launch_bounds__(DEC_THREADS) decode_split_kernel(const DecodeParams p) {
  constexpr int TPR = D / 8;                // threads per key row (8 dims each)
  constexpr int NG = DEC_THREADS / TPR;     // key rows processed side by side
  __shared__ float s_acc[NG][GC][D];        // per group partial outputs
  __shared__ float s_m[NG][GC], s_l[NG][GC];

  const int b = blockIdx.z, split = blockIdx.x;
  const int n_chunks = (p.group + GC - 1) / GC;
  const int hk = blockIdx.y / n_chunks, h0 = hk * p.group + (blockIdx.y % n_chunks) * GC;
  const int n_h = min(GC, hk * p.group + p.group - h0);
  const int grp = threadIdx.x / TPR, li = threadIdx.x % TPR;
  const int kv_len = min(p.seq_lens_k[b], p.kv_capacity);
  const int chunk = ((kv_len + p.n_split - 1) / p.n_split + 15) / 16 * 16;
  const int k_begin = split * chunk, k_end = min(kv_len, k_begin + chunk);

  float q[GC][8];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    if (i < n_h) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p.q + (int64_t(b) * p.n_head + h0 + i) * D + li * 8);
      bf16x8_to_f32(raw, q[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[i][e] *= p.scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[i][e] = 0.f;
    }
  }
  float m[GC], l[GC], acc[GC][8];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] = 0.f;
  }

  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  // Trip count uniform across the warp (its groups shuffle within the warp): keys past k_end are masked.
  for (int base = k_begin; base < k_end; base += NG * DEC_U) {
    const int key0 = base + grp * DEC_U;
    uint4 kr[DEC_U], vr[DEC_U];
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {  // issue all loads before the first use
      const int pos = key0 + u;
      if (pos < k_end) {
        const int64_t off = paged_row(bt_row, p.block_size, p.n_kv_head, D, pos, hk) + li * 8;
        kr[u] = __ldg(reinterpret_cast<const uint4*>(p.k + off));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(p.v + off));
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[DEC_U][GC];
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {
      float kf[8];
      bf16x8_to_f32(kr[u], kf);
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(q[i][e], kf[e], d);
#pragma unroll
        for (int off = TPR / 2; off > 0; off /= 2) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[u][i] = key0 + u < k_end ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int i = 0; i < GC; ++i) {
      float mx = m[i];
#pragma unroll
      for (int u = 0; u < DEC_U; ++u) mx = fmaxf(mx, s[u][i]);
      const float alpha = mx == -INFINITY ? 1.f : exp2_mufu(m[i] - mx);
      const float m_use = mx == -INFINITY ? 0.f : mx;
      m[i] = mx;
      l[i] *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] *= alpha;
#pragma unroll
      for (int u = 0; u < DEC_U; ++u) {
        const float pu = exp2_mufu(s[u][i] - m_use);
        l[i] += pu;
        float vf[8];
        bf16x8_to_f32(vr[u], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(pu, vf[e], acc[i][e]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < GC; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_acc[grp][i][li * 8 + e] = acc[i][e];
    if (li == 0) {
      s_m[grp][i] = m[i];
      s_l[grp][i] = l[i];
    }
  }
  __syncthreads();  // all groups' partials visible before the combine
  for (int idx = threadIdx.x; idx < n_h * D; idx += DEC_THREADS) {
    const int i = idx / D, d = idx % D;
    float mx = -INFINITY;
    for (int gi = 0; gi < NG; ++gi) mx = fmaxf(mx, s_m[gi][i]);
    float lsum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
      for (int gi = 0; gi < NG; ++gi) {
        const float w = exp2_mufu(s_m[gi][i] - mx);
        lsum += s_l[gi][i] * w;
        o += s_acc[gi][i][d] * w;
      }
    }
    const int64_t row = (int64_t(b) * p.n_head + h0 + i) * p.n_split + split;
    p.o_part[row * D + d] = lsum > 0.f ? o / lsum : 0.f;
    if (d == 0) p.lse_part[row] = lsum > 0.f ? mx + log2f(lsum) : -INFINITY;
  }
}

// One warp per (sequence, head): weights 2^(lse_s - max) over the splits.
template <int D>
__global__ void __launch_bounds__(128) decode_reduce_kernel(const DecodeParams p) {
  constexpr int PER_LANE = D / 32;
  const int w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (w >= p.batch * p.n_head) return;
  const float* lse = p.lse_part + int64_t(w) * p.n_split;
  float mx = -INFINITY;
  for (int s = lane; s < p.n_split; s += 32) mx = fmaxf(mx, lse[s]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float o[PER_LANE] = {};
  float lsum = 0.f;
  if (mx != -INFINITY) {
    for (int s = 0; s < p.n_split; ++s) {
      const float wgt = exp2_mufu(lse[s] - mx);
      lsum += wgt;
      const float* src = p.o_part + (int64_t(w) * p.n_split + s) * D + lane * PER_LANE;
#pragma unroll
      for (int e = 0; e < PER_LANE; ++e) o[e] = fmaf(wgt, src[e], o[e]);
    }
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  bf16* dst = p.out + int64_t(w) * D + lane * PER_LANE;
#pragma unroll
  for (int e = 0; e < PER_LANE; e += 2) {
    *reinterpret_cast<__nv_bfloat162*>(dst + e) = __floats2bfloat162_rn(o[e] * inv, o[e + 1] * inv);
  }
  if (p.lse && lane == 0) p.lse[w] = lsum > 0.f ? (mx + log2f(lsum)) * LN2 : -INFINITY;
}

template <int D, int GC>
cudaError_t launch_split(const DecodeParams& p, cudaStream_t s) {
  const int n_chunks = (p.group + GC - 1) / GC;
  dim3 grid(p.n_split, p.n_kv_head * n_chunks, p.batch);
  decode_split_kernel<D, GC><<<grid, DEC_THREADS, 0, s>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_decode_d(const DecodeParams& p, cudaStream_t s) {
  cudaError_t e;
  if (p.group == 1) e = launch_split<D, 1>(p, s);
  else if (p.group == 2) e = launch_split<D, 2>(p, s);
  else if (p.group <= 4) e = launch_split<D, 4>(p, s);
  else e = launch_split<D, 8>(p, s);  // groups > 8 are split into chunks of 8 heads
  if (e != cudaSuccess) return e;
  decode_reduce_kernel<D><<<(p.batch * p.n_head + 3) / 4, 128, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_decode(const DecodeParams& p, int head_dim, cudaStream_t s) {
  return head_dim == 64 ? launch_decode_d<64>(p, s) : launch_decode_d<128>(p, s);
}

}  // namespace mk::cuda::attn
