// Device helpers shared by the attention kernels: cp.async, ldmatrix, mma.sync (bf16), the XOR-swizzled
// shared-memory tile layout, paged-KV row addressing and the FA-4 exponential (polynomial exp2 on FMA units).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"

namespace mk::cuda::attn {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// ---- shared-memory tile [rows][D] bf16, 16-byte chunks XOR-swizzled by (row & 7) so that ldmatrix's 8 rows of
// one column chunk hit 8 different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {  // element offset of (row, col)
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

using mk::cuda::smem_u32;

// 16-byte async copy; src_bytes = 0 zero-fills the destination (rows past the sequence end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}

// D(16x8 f32) += A(16x16 bf16, row) * B(16x8 bf16, col)
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One warp's S = Q K^T on mma.sync: s [16 x 8 NT] f32 (zeroed here) from the A fragments of Q (16 rows x 16 KSTEPS
// head dims) and a K tile of 8 NT keys x D head dims, swizzled (swz) in shared memory.
template <int D, int NT, int KSTEPS>
__device__ __forceinline__ void warp_qk(float (&s)[NT][4], const uint32_t (&q)[KSTEPS][4],
                                        const __nv_bfloat16* k_tile, int lane) {
#pragma unroll
  for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
    for (int jp = 0; jp < NT / 2; ++jp) {
      uint32_t b0, b1, b2, b3;
      const int r = jp * 16 + (lane % 8) + 8 * (lane / 16), c = kk * 16 + 8 * ((lane / 8) % 2);
      ldmatrix_x4(b0, b1, b2, b3, k_tile + swz<D>(r, c));
      mma_bf16(s[2 * jp], q[kk], b0, b1);
      mma_bf16(s[2 * jp + 1], q[kk], b2, b3);
    }
  }
}

// One warp's O += P V on mma.sync: o [16 x 8 DT] f32, P as A fragments (16 rows x 16 KT keys, bf16), a V tile of
// 16 KT keys x D head dims swizzled in shared memory.
template <int D, int DT, int KT>
__device__ __forceinline__ void warp_pv(float (&o)[DT][4], const uint32_t (&p)[KT][4],
                                        const __nv_bfloat16* v_tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      uint32_t b0, b1, b2, b3;
      const int r = kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2), c = dp * 16 + 8 * (lane / 16);
      ldmatrix_x4_trans(b0, b1, b2, b3, v_tile + swz<D>(r, c));
      mma_bf16(o[2 * dp], p[kk], b0, b1);
      mma_bf16(o[2 * dp + 1], p[kk], b2, b3);
    }
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// exp2 on the MUFU unit.
__device__ __forceinline__ float exp2_mufu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// FA-4 (a): exp2 on the FMA units, no conversion instructions (FRND / F2I run at a quarter of the FMA rate, as
// MUFU does, so a floor() + int conversion would move the load instead of removing it). x = n + f with n the
// nearest integer, found by adding 1.5 * 2^23 (the FADD's rounding puts n in the low mantissa bits of j), f in
// [-0.5, 0.5]; 2^f by a degree-3 polynomial with p(0) = 1 exactly (relative error 1.0e-4, below bf16's half
// ulp 2^-9); 2^n by adding j's low bits, shifted, to the exponent field. Valid for x <= 8 (lazy rescaling keeps
// the probabilities below 2^threshold). x is clamped at -127: then n = -127 means f >= 0 and p >= 1, so the
// exponent never wraps; -inf (masked) gives exactly 0.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -127.f);
  const float j = x + 12582912.f;
  const float f = x - (j - 12582912.f);
  float p = fmaf(0.05500894f, f, 0.24221075f);
  p = fmaf(p, f, 0.6932829f);
  p = fmaf(p, f, 1.0f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(j) << 23));
}

// Online softmax over one key tile in mma accumulator layout (softmax_scores: everything but the rescaling of
// o, which it returns as alpha when it returns true, so that a caller with P V in flight can defer it): s[NT][4] holds this thread's scores of rows g
// and g+8 (of a warp's 16) for keys 8j+2t, 8j+2t+1 (masked entries already -inf). Updates the running max
// m_run (log2 units, scaled) and partial sums l_run, rescales o, and writes P as bf16 A fragments
// (k-step j/2: regs {0,1} from even j, {2,3} from odd j). FA-4 (b): o and l are rescaled only when some row of
// the warp grew its max by more than `threshold` (warp-uniform branch, so probabilities stay <= 2^threshold;
// threshold 0 = classic). FA-4 (a): chunks j < n_poly_eighths * NT / 8 use exp2_poly (FMA units);
// supported eighths 0..4 and 8 (5..7 run as 8: the caller quantises).
// p = 2^(s * scale_log2 - m_use) for one tile; columns chunks j < N_POLY on the FMA units (exp2_poly), the rest
// on MUFU. Accumulates the row sums and writes P (bf16 A fragments, or in place in s).
template <int N_POLY, bool IN_PLACE, int NT>
__device__ __forceinline__ void exp_scores(float (&s)[NT][4], const float (&m_use)[2], float scale_log2,
                                           float (&l_run)[2], uint32_t (&p_frag)[NT / 2][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float x0 = fmaf(s[j][2 * r], scale_log2, -m_use[r]);
      const float x1 = fmaf(s[j][2 * r + 1], scale_log2, -m_use[r]);
      float e0, e1;
      if (j < N_POLY) {  // j and N_POLY are compile-time constants after unrolling
        e0 = exp2_poly(x0);
        e1 = exp2_poly(x1);
      } else {
        e0 = exp2_mufu(x0);
        e1 = exp2_mufu(x1);
      }
      l_run[r] += e0 + e1;
      if constexpr (IN_PLACE) {
        s[j][2 * r] = e0;
        s[j][2 * r + 1] = e1;
      } else {
        p_frag[j / 2][(j & 1) * 2 + r] = pack_bf16(e0, e1);
      }
    }
  }
}

// IN_PLACE: the probabilities overwrite s (fp32) and p_frag is untouched (pack_p converts them later, when
// the registers of the previous P are free again).
template <bool IN_PLACE = false, int NT>
__device__ __forceinline__ bool softmax_scores(float (&s)[NT][4], float (&m_run)[2], float (&l_run)[2],
                                               float (&alpha)[2], uint32_t (&p_frag)[NT / 2][4], float scale_log2,
                                               float threshold, int n_poly_eighths) {
  float m_tile[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    m_tile[r] = mx * scale_log2;
  }
  const bool grow = m_tile[0] > m_run[0] + threshold || m_tile[1] > m_run[1] + threshold;
  const bool rescale = __any_sync(0xffffffffu, grow);
  alpha[0] = alpha[1] = 1.f;
  if (rescale) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m_run[r], m_tile[r]);
      alpha[r] = m_new == -INFINITY ? 1.f : exp2_mufu(m_run[r] - m_new);
      m_run[r] = m_new;
      l_run[r] *= alpha[r];
    }
  }
  const float m_use[2] = {m_run[0] == -INFINITY ? 0.f : m_run[0], m_run[1] == -INFINITY ? 0.f : m_run[1]};
  // The split is a compile-time constant in each branch, so the polynomial columns never issue MUFU.EX2 (a
  // run-time per-column choice was if-converted into MUFU for every element plus the polynomial).
  switch (n_poly_eighths) {
    case 0: exp_scores<0, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;
    case 1: exp_scores<NT / 8, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;
    case 2: exp_scores<NT / 4, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;
    case 3: exp_scores<3 * NT / 8, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;
    case 4: exp_scores<NT / 2, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;
    default: exp_scores<NT, IN_PLACE>(s, m_use, scale_log2, l_run, p_frag); break;  // all on the FMA units
  }
  return rescale;
}

template <int NT>
__device__ __forceinline__ void pack_p(const float (&s)[NT][4], uint32_t (&p_frag)[NT / 2][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) p_frag[j / 2][(j & 1) * 2 + r] = pack_bf16(s[j][2 * r], s[j][2 * r + 1]);
}

// o rows g (r = 0) and g + 8 (r = 1) times alpha[r].
template <int DT>
__device__ __forceinline__ void rescale_o(float (&o)[DT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < DT; ++j) {
    o[j][0] *= alpha[0];
    o[j][1] *= alpha[0];
    o[j][2] *= alpha[1];
    o[j][3] *= alpha[1];
  }
}

template <int NT, int DT>
__device__ __forceinline__ void softmax_tile(float (&s)[NT][4], float (&o)[DT][4], float (&m_run)[2],
                                             float (&l_run)[2], uint32_t (&p_frag)[NT / 2][4], float scale_log2,
                                             float threshold, int n_poly_eighths) {
  float alpha[2];
  if (softmax_scores(s, m_run, l_run, alpha, p_frag, scale_log2, threshold, n_poly_eighths)) rescale_o(o, alpha);
}

// Element offset of key position `pos` (head hk) in a paged pool [n_blocks, block_size, n_kv_head, D].
__device__ __forceinline__ int64_t paged_row(const int32_t* block_table_row, int block_size, int n_kv_head, int D,
                                             int pos, int hk) {
  const int blk = block_table_row[pos / block_size];
  return ((int64_t(blk) * block_size + pos % block_size) * n_kv_head + hk) * D;
}

// Epilogue of both prefill kernels: this thread's two rows (row_in_seq[r] < q_len of the sequence at q0, head h)
// divided by their running sums reduced over the quad (exact whatever the rescaling policy), stored in bf16, and
// their log-sum-exp (natural log) when lse is set.
template <int D, int DT>
__device__ __forceinline__ void store_out_rows(__nv_bfloat16* out, float* lse, int n_head, const float (&o)[DT][4],
                                               const float (&m_run)[2], const float (&l_run)[2],
                                               const int (&row_in_seq)[2], int q_len, int q0, int h, int t) {
  const int64_t q_row_stride = int64_t(n_head) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row_in_seq[r];
    if (row >= q_len) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    __nv_bfloat16* out_row = out + (int64_t(q0) + row) * q_row_stride + int64_t(h) * D;
#pragma unroll
    for (int j = 0; j < DT; ++j)
      *reinterpret_cast<__nv_bfloat162*>(out_row + j * 8 + 2 * t) =
          __floats2bfloat162_rn(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (lse && t == 0) lse[(int64_t(q0) + row) * n_head + h] = l > 0.f ? (m_run[r] + log2f(l)) * LN2 : -INFINITY;
  }
}

}  // namespace mk::cuda::attn
