// FA2-style prefill kernel (the correctness baseline and the fallback): one CTA of 4 warps per 64 query rows
// of one head; K/V 64-key tiles streamed from the paged cache with cp.async into a double buffer; S = Q K^T and
// O += P V on mma.sync m16n8k16 (bf16, fp32 accumulate); online softmax in registers with the FA-4 switches
// (polynomial exp2 for part of the columns, lazy rescaling). Instantiated per head dim in prefill_simple_d*.cu.
// Reference: cpu::attention_prefill (src/cpu/attention_ref.h); test: tests/gpu/test_attention.cu.
#pragma once
#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"

namespace mk::cuda::attn {

constexpr int SIMPLE_BM = 64;  // query rows per CTA (16 per warp)
constexpr int SIMPLE_BN = 64;  // keys per tile (KV_BLOCK_ALIGN: never straddles a pool block)
constexpr int SIMPLE_THREADS = 128;

template <int D>
constexpr int simple_smem_bytes() {  // Q tile + 2 x (K tile + V tile)
  return (SIMPLE_BM * D + 2 * 2 * SIMPLE_BN * D) * 2;
}

// Loads rows [row0, row0 + 64) of a [rows][D] tile; rows >= n_valid are zero-filled. row_ptr(r) gives the
// global address of row r.
template <int D, class RowPtr>
__device__ __forceinline__ void load_tile(bf16* s_tile, int n_valid, RowPtr row_ptr) {
  constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < 64 * CHUNKS; i += SIMPLE_THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool ok = r < n_valid;
    const bf16* src = ok ? row_ptr(r) + c * 8 : row_ptr(0);
    cp_async16(s_tile + swz<D>(r, c * 8), src, ok ? 16 : 0);
  }
}

template <int D>
__global__ void __launch_bounds__(SIMPLE_THREADS) prefill_simple_kernel(const PrefillParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);  // [64][D]
  bf16* s_k = s_q + SIMPLE_BM * D;                 // [2][64][D]
  bf16* s_v = s_k + 2 * SIMPLE_BN * D;             // [2][64][D]

  const int b = blockIdx.z, h = blockIdx.y;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal: last) row blocks first
  const int q0 = p.cu_seqlens_q[b], q_len = p.cu_seqlens_q[b + 1] - q0;
  const int m0 = m_block * SIMPLE_BM;
  if (m0 >= q_len) return;
  const int kv_len = min(p.seq_lens_k[b], p.kv_capacity);
  const int hk = h / p.group;
  const int diag = kv_len - q_len;  // query i sees keys <= i + diag when causal
  int n_end = kv_len;
  if (p.causal) n_end = max(0, min(kv_len, min(q_len, m0 + SIMPLE_BM) + diag));
  const int n_tiles = (n_end + SIMPLE_BN - 1) / SIMPLE_BN;

  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  const int64_t q_row_stride = int64_t(p.n_head) * D;
  const bf16* q_base = p.q + (int64_t(q0) + m0) * q_row_stride + int64_t(h) * D;
  load_tile<D>(s_q, q_len - m0, [&](int r) { return q_base + r * q_row_stride; });
  auto load_kv = [&](int tile, int buf) {
    const int n0 = tile * SIMPLE_BN;
    const int n_valid = min(SIMPLE_BN, kv_len - n0);
    // One 64-key tile lies in one pool block (block_size % 64 == 0): one table lookup per tile.
    const int64_t base = paged_row(bt_row, p.block_size, p.n_kv_head, D, n0, hk);
    const int64_t stride = int64_t(p.n_kv_head) * D;
    load_tile<D>(s_k + buf * SIMPLE_BN * D, n_valid, [&](int r) { return p.k + base + r * stride; });
    load_tile<D>(s_v + buf * SIMPLE_BN * D, n_valid, [&](int r) { return p.v + base + r * stride; });
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  constexpr int KSTEPS = D / 16;  // k-steps of Q K^T
  constexpr int NT = SIMPLE_BN / 8;  // 8-key subtiles of S
  constexpr int DT = D / 8;          // 8-wide subtiles of O
  uint32_t q_frag[KSTEPS][4];
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max applied to o and l (log2 units, scaled)
  float l_run[2] = {0.f, 0.f};              // this thread's partial row sums
  const int row_in_seq[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < n_tiles) load_kv(tile + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // everything but the prefetch just issued has landed
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), c = kk * 16 + 8 * (lane / 16);
        ldmatrix_x4(q_frag[kk][0], q_frag[kk][1], q_frag[kk][2], q_frag[kk][3], s_q + swz<D>(r, c));
      }
    }
    const bf16* k_t = s_k + buf * SIMPLE_BN * D;
    const bf16* v_t = s_v + buf * SIMPLE_BN * D;
    float s[NT][4];
    warp_qk<D>(s, q_frag, k_t, lane);
    // Mask keys past the end and, when causal, past each row's diagonal.
    const int n0 = tile * SIMPLE_BN;
    const bool need_mask = n0 + SIMPLE_BN > kv_len || (p.causal && n0 + SIMPLE_BN - 1 > m0 + diag);
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + j * 8 + 2 * t + (e & 1);
          const int lim = p.causal ? min(kv_len - 1, row_in_seq[e / 2] + diag) : kv_len - 1;
          if (key > lim) s[j][e] = -INFINITY;
        }
    }
    uint32_t p_frag[SIMPLE_BN / 16][4];
    softmax_tile(s, o, m_run, l_run, p_frag, p.scale_log2, p.rescale_threshold, p.n_poly);
    warp_pv<D>(o, p_frag, v_t, lane);
    __syncthreads();  // all warps done with buf before the next iteration's prefetch overwrites it
  }
  cp_async_wait<0>();

  // Final normalisation with the max actually applied: exact whatever the rescaling policy.
  store_out_rows<D, DT>(p.out, p.lse, p.n_head, o, m_run, l_run, row_in_seq, q_len, q0, h, t);
}

template <int D>
cudaError_t launch_prefill_simple(const PrefillParams& p, cudaStream_t s) {
  constexpr int smem = simple_smem_bytes<D>();
  static bool attr_set = false;  // raise the dynamic shared-memory limit once per process
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(prefill_simple_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  dim3 grid((p.max_seqlen_q + SIMPLE_BM - 1) / SIMPLE_BM, p.n_head, p.batch);
  prefill_simple_kernel<D><<<grid, SIMPLE_THREADS, smem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace mk::cuda::attn
