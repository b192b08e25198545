// Shared by the matvec kernels (matvec.cu: split-K, the default; matvec_rowpair.cu: the first version).
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

// RoPE epilogue of the QKV projection: rows 2j, 2j+1 of a head are its dims j and j + D/2.
__device__ __forceinline__ void rope_store(const MatvecRope& r, int row, float y0, float y1) {
  const int D = r.head_dim, half = D / 2, head = row / D, j = (row % D) >> 1;
  const int pos = *r.pos;
  if (head < r.n_head + r.n_kv_head) {
    float s, c;
    sincosf(float(pos) * r.inv_freq[j], &s, &c);
    const float a = y0 * c - y1 * s, b = y1 * c + y0 * s;
    y0 = a;
    y1 = b;
  }
  bf16* dst;
  if (head < r.n_head) {
    dst = r.q_out + size_t(head) * D;
  } else {
    if (pos >= r.max_positions) return;
    const bool is_k = head < r.n_head + r.n_kv_head;
    const int kvh = is_k ? head - r.n_head : head - r.n_head - r.n_kv_head;
    const int blk = r.block_table[pos / r.kv.kv_block_size];
    dst = (is_k ? r.kv.k : r.kv.v) +
          ((size_t(blk) * r.kv.kv_block_size + pos % r.kv.kv_block_size) * r.kv.n_kv_head + kvh) * size_t(D);
  }
  dst[j] = __float2bfloat16(y0);
  dst[j + half] = __float2bfloat16(y1);
}

// ROPE_QKV_NORM, rows 2j, 2j + 1 of a q or k head (dims j, j + D/2), its sum of squares known: the head's RMSNorm
// (as cpu::rmsnorm: w * (y * inv_rms)), then RoPE and the store. nw: rope.q_norm or rope.k_norm.
__device__ __forceinline__ void norm_rope_store(const MatvecRope& r, const float* nw, int row, float inv_rms,
                                                float y0, float y1) {
  const int j = (row % r.head_dim) >> 1;
  rope_store(r, row, nw[j] * (y0 * inv_rms), nw[j + r.head_dim / 2] * (y1 * inv_rms));
}

// Stages x into s_x ([n_cols] floats; with NORM times the norm weight, which thread `tid` staged at the very elements
// it rescales here: no barrier needed between), XB loads of x in flight per thread before any is used (x comes from
// L2: its latency hidden XB at a time). Returns the thread's share of the sum of squares of x (NORM).
// bf16 x without NORM (the down projection's h) wider than two rounds of 8-byte loads goes in 16-byte loads: 8B's
// 14336 columns in two L2 round trips per thread instead of four (H200: -0.35% per 8B token). At 8192 columns and
// 256 threads (1B) the 16-byte loads measured 0.8% slower per token than the two rounds below (RESULTS.md).
// Every block reads all of x from L2 right after the wait; that round trip grows with the bytes of x read per SM
// (x read by every lane instead of once per block: far slower), not with which lines the blocks ask for at once
// (each block starting at a different column: no better). RESULTS.md, session 11.
template <bool NORM, class XT>
__device__ __forceinline__ float stage_x(const MatvecArgs& a, float* s_x, int tid, int n_threads) {
  constexpr int XB = 4;
  float ss = 0.f;
  if (sizeof(XT) == 2 && !NORM && a.n_cols > 2 * XB * 4 * n_threads) {
    for (int i0 = tid * 8; i0 < a.n_cols; i0 += n_threads * 8 * XB) {  // n_cols % 8 == 0 (matvec's check)
      uint4 v[XB];
#pragma unroll
      for (int k = 0; k < XB; ++k) {
        const int i = i0 + k * n_threads * 8;
        if (i < a.n_cols) v[k] = __ldcg(reinterpret_cast<const uint4*>(a.x_bf16 + i));
      }
#pragma unroll
      for (int k = 0; k < XB; ++k) {
        const int i = i0 + k * n_threads * 8;
        if (i < a.n_cols) {
          const uint4 u = v[k];
          *reinterpret_cast<float4*>(s_x + i) = make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
          *reinterpret_cast<float4*>(s_x + i + 4) = make_float4(bf16_lo(u.z), bf16_hi(u.z), bf16_lo(u.w), bf16_hi(u.w));
        }
      }
    }
    return ss;
  }
  for (int i0 = tid * 4; i0 < a.n_cols; i0 += n_threads * 4 * XB) {
    float4 v[XB];
#pragma unroll
    for (int k = 0; k < XB; ++k) {
      const int i = i0 + k * n_threads * 4;
      if (i < a.n_cols) {
        if constexpr (sizeof(XT) == 4) {
          v[k] = __ldcg(reinterpret_cast<const float4*>(a.x + i));
        } else {
          const uint2 raw = __ldcg(reinterpret_cast<const uint2*>(a.x_bf16 + i));
          v[k] = make_float4(bf16_lo(raw.x), bf16_hi(raw.x), bf16_lo(raw.y), bf16_hi(raw.y));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < XB; ++k) {
      const int i = i0 + k * n_threads * 4;
      if (i < a.n_cols) {
        if constexpr (NORM) {
          ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
          const float4 g = *reinterpret_cast<const float4*>(s_x + i);
          v[k] = make_float4(v[k].x * g.x, v[k].y * g.y, v[k].z * g.z, v[k].w * g.w);
        }
        *reinterpret_cast<float4*>(s_x + i) = v[k];
      }
    }
  }
  return ss;
}

// Epilogue of one finished row pair, the same in every kernel: rows r and (when has1) r + 1 get the bias, then go
// out in the kernel's mode (ROPE_QKV_NORM: only the v heads, which take no norm, come through here); STORE with ARGMAX also folds them into the thread's running argmax `best`. ADD adds to
// old0/old1 (the rows of out read earlier, see MatvecArgs::add_early) when use_old, else to out as it is now.
template <MatvecOut MODE, bool ARGMAX>
__device__ __forceinline__ void store_row_pair(const MatvecArgs& a, int r, bool has1, float y0, float y1,
                                               unsigned long long& best, bool use_old = false, float old0 = 0.f,
                                               float old1 = 0.f) {
  if (a.bias) {
    y0 += a.bias[r];
    if (has1) y1 += a.bias[r + 1];
  }
  if constexpr (MODE == MatvecOut::STORE) {
    a.out[r] = y0;
    if (has1) a.out[r + 1] = y1;
    if constexpr (ARGMAX) {
      best = max(best, argmax_pack(y0, r));
      if (has1) best = max(best, argmax_pack(y1, r + 1));
    }
  } else if constexpr (MODE == MatvecOut::ADD) {
    a.out[r] = (use_old ? old0 : a.out[r]) + y0;
    if (has1) a.out[r + 1] = (use_old ? old1 : a.out[r + 1]) + y1;
  } else if constexpr (MODE == MatvecOut::SWIGLU) {
    const float h = y0 / (1.f + __expf(-y0)) * y1;
    if (a.out_bf16) a.out_bf16[r >> 1] = __float2bfloat16(h);
    else a.out[r >> 1] = h;
  } else {
    rope_store(a.rope, r, y0, y1);
  }
}

// The end of a fused argmax, the same in every kernel: each warp's running maximum (lane 0's `best`) goes through
// s_best[warp]; after `sync` (the barrier of the n_warps computing warps) thread 0 folds them into one atomicMax.
template <class Sync>
__device__ __forceinline__ void argmax_commit(unsigned long long* argmax, unsigned long long* s_best,
                                              unsigned long long best, int n_warps, Sync sync) {
  if ((threadIdx.x & 31) == 0) s_best[threadIdx.x >> 5] = best;
  sync();
  if (threadIdx.x == 0) {
    unsigned long long b = 0;
    for (int i = 0; i < n_warps; ++i) b = max(b, s_best[i]);
    if (b) atomicMax(argmax, b);
  }
}

// The template switch of every matvec entry point: calls launch.template operator()<MODE, NORM, ARGMAX>() for a's
// output mode, whether it has a norm weight, and its argmax (STORE only).
template <class L>
void dispatch_matvec(const MatvecArgs& a, L&& launch) {
  auto by_norm = [&]<MatvecOut MODE, bool ARGMAX>() {
    if (a.norm_w) launch.template operator()<MODE, true, ARGMAX>();
    else launch.template operator()<MODE, false, ARGMAX>();
  };
  switch (a.mode) {
    case MatvecOut::STORE:
      if (a.argmax) by_norm.template operator()<MatvecOut::STORE, true>();
      else by_norm.template operator()<MatvecOut::STORE, false>();
      break;
    case MatvecOut::ADD: by_norm.template operator()<MatvecOut::ADD, false>(); break;
    case MatvecOut::SWIGLU: by_norm.template operator()<MatvecOut::SWIGLU, false>(); break;
    case MatvecOut::ROPE_QKV: by_norm.template operator()<MatvecOut::ROPE_QKV, false>(); break;
    case MatvecOut::ROPE_QKV_NORM: by_norm.template operator()<MatvecOut::ROPE_QKV_NORM, false>(); break;
  }
}

void matvec_rowpair(const Stream& s, const MatvecArgs& a);
void matvec_splitk(const Stream& s, const MatvecArgs& a);

}  // namespace mk::cuda
