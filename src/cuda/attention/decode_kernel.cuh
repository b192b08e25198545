// The split-KV decode kernel (see decode.cu for the design; helpers in decode_device.cuh). Included only by
// decode.cu: the template lives in that translation unit's anonymous namespace.
#pragma once
#include <cooperative_groups.h>

#include "cuda/attention/decode_device.cuh"
#include "cuda/common/rope_head.cuh"

namespace mk::cuda::attn {
namespace {

// Decode with RoPE in the kernel (p.rope.qkv): the CTA's n_h query heads from h0, normed and rotated at position
// pos, into s_q [n_h][D]; with `owner` (this CTA's keys hold pos) also kv head hk's K (normed, rotated) and V rows
// of pos into the cache. A warp per head; the closing barrier orders the rows' stores before the CTA's own
// cp.async reads of them (every CTA holding pos writes the same bits, so another CTA's reads see them either way).
template <int D, int W>
__device__ __forceinline__ void rope_q_and_newest_kv(const DecodeParams& p, bf16* s_q, int b, int h0, int n_h, int hk,
                                                     int pos, bool owner, const int32_t* bt_row) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_all = p.n_head + 2 * p.n_kv_head;
  const float* raw = p.rope.qkv + int64_t(b) * n_all * D;
  const int jobs = n_h + (owner ? 2 : 0);
  for (int job = warp; job < jobs; job += W) {
    const bool is_q = job < n_h, is_k = job == n_h;
    const int head = is_q ? h0 + job : p.n_head + (is_k ? 0 : p.n_kv_head) + hk;
    float x0[ROPE_MAX_PAIRS_PER_LANE], x1[ROPE_MAX_PAIRS_PER_LANE];
    rope_head_warp(raw + head * D, p.rope.bias ? p.rope.bias + head * D : nullptr, p.rope.pair_rows,
                   is_q ? p.rope.q_norm : (is_k ? p.rope.k_norm : nullptr), p.rope.eps, is_q || is_k,
                   p.rope.inv_freq, pos, D, lane, x0, x1);
    bf16* dst = is_q ? s_q + job * D
                     : (is_k ? p.k_new : p.v_new) + paged_row(bt_row, p.block_size, p.n_kv_head, D, pos, hk);
    rope_head_store(dst, x0, x1, D, lane);
  }
  __syncthreads();
}

// TWO: the CTA has more than 8 query heads, so the mma rows g + 8 are live (else they are padding: skipped in
// the softmax, their P is zero). EARLY: the caller's contract (AttentionOptions::decode_early_kv) lets the
// kernel read seq_lens_k, the block table and every K/V row but the newest of each sequence before its PDL
// wait, so the first tiles stream while the previous kernel finishes. CL: the grid is launched in clusters of
// n_split CTAs (one cluster = the splits of one (sequence, kv head chunk)); the partials stay in shared memory
// and are combined through DSMEM after a cluster barrier (no workspace, fence or counter). TS: 0 = every lane
// loads 16-byte pieces of its warp's tiles by cp.async; 3 / 6 = TMA (tma_tile in decode_device.cuh): lane 0
// issues one tensor copy per K and V tile completing on the stage's mbarrier, TS stages per warp (D = 64, W = 4,
// CPS = 1, !CL only; tm_k / tm_v the tensor maps, else null).
template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL, int TS>
__device__ __forceinline__ void decode_body(const DecodeParams& p, const CUtensorMap* tm_k, const CUtensorMap* tm_v) {
  constexpr bool TMA = TS > 0;
  static_assert(!TMA || (D == 64 && W == 4 && CPS == 1 && !CL), "TMA tiles: head dim 64, 4 warps, 1 CTA/SM, no cluster");
  constexpr int THREADS = 32 * W;
  constexpr int TK = TMA ? tma_tile_keys<TS>() : tile_keys<D, W, CPS>();
  constexpr int NSX = TMA ? TS : NS;  // ring stages per warp
  constexpr int NT = TK / 8;       // 8-key column blocks of S
  constexpr int KSTEPS = D / 16;   // k-steps of Q K^T
  constexpr int DT = D / 8;        // 8-wide column blocks of O
  constexpr int CH = D / 8;        // 16-byte chunks per K/V row
  constexpr int STAGE = 2 * TK * D;  // elements: K tile [TK][D] then V tile [TK][D], rows swizzled
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ float s_m[W][HROWS], s_l[W][HROWS];
  __shared__ int s_last;
  __shared__ uint64_t s_full[W][TMA ? NSX : 1];  // TMA: per warp and stage, completes when its K + V tile landed

#if MK_DECODE_TRACE
  unsigned long long tr_[6] = {};
#endif
  TR_STAMP(0);
  const int b = blockIdx.z, split = blockIdx.x;
  const int n_chunks = (p.group + HROWS - 1) / HROWS;
  const int hk = blockIdx.y / n_chunks;
  // Without EARLY everything below reads q / seq_lens / K/V that the previous kernel may have written.
  if constexpr (!EARLY) {
    if (p.l2_prefetch_tiles > 0) prefetch_first_tiles<D, W, TK>(p, b, split, hk, threadIdx.x / 32, threadIdx.x % 32);
    pdl_wait();
    pdl_launch_dependents();
    TR_STAMP(1);
  }

  const int h0 = hk * p.group + (blockIdx.y % n_chunks) * HROWS;
  const int n_h = min(HROWS, hk * p.group + p.group - h0);
  const int kv_len = max(0, min(p.seq_lens_k[b], p.kv_capacity));
  // Split boundaries in 64-key units (same arithmetic in every CTA of the sequence).
  const int units = (kv_len + 63) / 64;
  const int per = max(1, (units + p.n_split - 1) / p.n_split);
  const int n_used = max(1, (units + per - 1) / per);
  // CL: a split past the keys still takes part in the cluster barriers (with an empty partial), unless there is
  // a single split, which writes the output itself (every CTA computes the same n_used: no barrier is run).
  if (split >= n_used && (!CL || n_used == 1)) return;
  const int k_begin = split * per * 64, k_end = min(kv_len, k_begin + per * 64);
  const int n_tiles = max(0, (k_end - k_begin + TK - 1) / TK);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int my_tiles = warp < n_tiles ? (n_tiles - warp + W - 1) / W : 0;

  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  // rope (p.rope.qkv): the CTA's query heads, normed and rotated, past the ring (decode_smem_bytes).
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw + smem_bytes<D, W, CPS>());
  // Q as mma A fragments: rows = query heads h0 + row (rows >= n_h are zero), columns = dims.
  uint32_t qf[KSTEPS][4];
  auto load_q = [&] {
    if (p.rope.qkv) {  // uniform: q made here (and the newest K/V row written by the CTA whose keys hold it)
      rope_q_and_newest_kv<D, W>(p, s_q, b, h0, n_h, hk, kv_len - 1, k_begin <= kv_len - 1 && kv_len - 1 < k_end,
                                 bt_row);
      const uint32_t* q0 = reinterpret_cast<const uint32_t*>(s_q) + t;
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        qf[kk][0] = g < n_h ? q0[(g * D + kk * 16) / 2] : 0u;
        qf[kk][2] = g < n_h ? q0[(g * D + kk * 16 + 8) / 2] : 0u;
        qf[kk][1] = TWO && g + 8 < n_h ? q0[((g + 8) * D + kk * 16) / 2] : 0u;
        qf[kk][3] = TWO && g + 8 < n_h ? q0[((g + 8) * D + kk * 16 + 8) / 2] : 0u;
      }
      return;
    }
    const bf16* q0 = p.q + (int64_t(b) * p.n_head + h0) * D + 2 * t;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      qf[kk][0] = g < n_h ? ld_b32(q0 + g * D + kk * 16) : 0u;
      qf[kk][2] = g < n_h ? ld_b32(q0 + g * D + kk * 16 + 8) : 0u;
      qf[kk][1] = TWO && g + 8 < n_h ? ld_b32(q0 + (g + 8) * D + kk * 16) : 0u;
      qf[kk][3] = TWO && g + 8 < n_h ? ld_b32(q0 + (g + 8) * D + kk * 16 + 8) : 0u;
    }
  };
  if constexpr (!EARLY) load_q();

  // TMA's 128-byte swizzle is the swz<64> pattern only from a 1024-byte aligned base (smem_bytes: +1 KB).
  bf16* ring = reinterpret_cast<bf16*>(TMA ? smem_raw + ((1024 - smem_u32(smem_raw) % 1024) % 1024) : smem_raw) +
               warp * NSX * STAGE;
  const int64_t row_stride = int64_t(p.n_kv_head) * D;
  // TMA: the pool blocks of this warp's tiles, one per lane: tiles [32 k, 32 k + 32) in blk_cur while they are
  // issued, the next window loaded into blk_nxt 24 issues ahead (so no issue waits for a block-table load).
  auto tile_blk = [&](int i) { return i < my_tiles ? bt_row[(k_begin + (warp + i * W) * TK) / p.block_size] : 0; };
  int blk_cur = 0, blk_nxt = 0;
  if constexpr (TMA) {
    if (lane == 0) {
#pragma unroll
      for (int s = 0; s < NSX; ++s) mbar_init(&s_full[warp][s], 1);
      fence_mbarrier_init();
    }
    blk_cur = tile_blk(lane);
    __syncwarp();
  }
  // Issues this warp's i-th tile into stage i % NSX; cp.async: rows past k_end are zero-filled (never read from
  // global); TMA: the whole box is loaded (rows past k_end are masked, and V's zeroed after landing).
  auto issue = [&](int i) {
    if constexpr (TMA) {  // called by the whole warp (the block window is spread over its lanes)
      if (i % 32 == 0 && i > 0) blk_cur = blk_nxt;
      const int blk = __shfl_sync(0xffffffffu, blk_cur, i % 32);
      if (i % 32 == 8) blk_nxt = tile_blk(i + 24 + lane);
      if (lane == 0) {
        const int key0 = k_begin + (warp + i * W) * TK;
        tma_tile(ring + (i % NSX) * STAGE, TK * D, &s_full[warp][i % NSX], tm_k, tm_v, hk,
                 blk * p.block_size + key0 % p.block_size, 2 * TK * D * 2);
      }
      return;
    }
    const int key0 = k_begin + (warp + i * W) * TK;
    const int n_valid = min(TK, k_end - key0);
    // A tile never straddles a pool block: key0 % TK == 0 and block_size % 64 == 0.
    const int64_t base = paged_row(bt_row, p.block_size, p.n_kv_head, D, key0, hk);
    bf16* sk = ring + (i % NSX) * STAGE;
    bf16* sv = sk + TK * D;
#pragma unroll
    for (int j = 0; j < TK * CH / 32; ++j) {
      const int c = lane + 32 * j, r = c / CH, col = (c % CH) * 8;
      const bool ok = r < n_valid;
      const int64_t off = ok ? base + r * row_stride + col : 0;
      cp_async16(sk + swz<D>(r, col), p.k + off, ok ? 16 : 0);
      cp_async16(sv + swz<D>(r, col), p.v + off, ok ? 16 : 0);
    }
  };
  int n_pre = 0;  // ring stages issued before the PDL wait (EARLY)
  if constexpr (EARLY) {
    // Only tiles that end below the newest position kv_len - 1 (the previous kernel may be the one appending
    // it); this warp's tiles come in key order, so they form a prefix. A TMA box is exactly its tile, so the
    // tile holding kv_len - 1 (the only one with rows past the keys) is never issued here. early_stages counts
    // thirds of the ring (NSX stages); the whole ring: the loop below then skips the issue of tile NSX - 1.
    const int pre = p.early_stages * NSX / NS;
#pragma unroll
    for (; n_pre < NSX && n_pre < pre && n_pre < my_tiles; ++n_pre) {
      if (min(k_end, k_begin + (warp + n_pre * W) * TK + TK) > kv_len - 1) break;
      issue(n_pre);
      if constexpr (!TMA) cp_async_commit();
    }
    pdl_wait();  // q, the workspace and the newest K/V row are read / written only after this
    pdl_launch_dependents();
    TR_STAMP(1);
    load_q();
  }
#pragma unroll
  for (int i = 0; i < NSX - 1; ++i) {
    if (i < n_pre) continue;
    if (i < my_tiles) issue(i);
    if constexpr (!TMA) cp_async_commit();
  }

  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max (log2 units, scaled) of rows g, g + 8
  float l_run[2] = {0.f, 0.f};              // this thread's partial row sums

  for (int i = 0; i < my_tiles; ++i) {
    if (i + NSX - 1 < my_tiles && i + NSX - 1 >= n_pre) issue(i + NSX - 1);  // into the stage computed in i - 1
    const int key0 = k_begin + (warp + i * W) * TK;
    if constexpr (TMA) {
      mbar_wait(&s_full[warp][i % NSX], (i / NSX) & 1);  // tile i's K and V have landed
      if (key0 + TK > k_end) tma_zero_rows<D>(ring + (i % NSX) * STAGE + TK * D, k_end - key0, TK, lane);
    } else {
      cp_async_commit();
      cp_async_wait<NS - 1>();  // tile i has landed (for this lane) ...
      __syncwarp();             // ... and for every lane of the warp
    }
    const bf16* sk = ring + (i % NSX) * STAGE;
    const bf16* sv = sk + TK * D;
    float s[NT][4];
    warp_qk<D>(s, qf, sk, lane);
    if (key0 + TK > k_end) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + j * 8 + 2 * t + (e & 1) >= k_end) s[j][e] = -INFINITY;
    }
    // Online softmax per live row; every tile holds at least one valid key, so m_new is finite.
    uint32_t pf[TK / 16][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (r == 1 && !TWO) {
#pragma unroll
        for (int j = 0; j < NT; ++j) pf[j / 2][(j & 1) * 2 + 1] = 0u;
        continue;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx * p.scale_log2);
      const float alpha = exp2_mufu(m_run[r] - m_new);  // 0 on the first tile (m_run = -inf)
      m_run[r] = m_new;
      l_run[r] *= alpha;
#pragma unroll
      for (int j = 0; j < DT; ++j) {
        o[j][2 * r] *= alpha;
        o[j][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float e0 = exp2_mufu(fmaf(s[j][2 * r], p.scale_log2, -m_new));
        const float e1 = exp2_mufu(fmaf(s[j][2 * r + 1], p.scale_log2, -m_new));
        l_run[r] += e0 + e1;
        pf[j / 2][(j & 1) * 2 + r] = pack_bf16(e0, e1);
      }
    }
    warp_pv<D>(o, pf, sv, lane);
    __syncwarp();  // every lane done with stage i % NS before iteration i + 1 refills it
  }
  if constexpr (!TMA) cp_async_wait<0>();  // (TMA: every issued tile was waited for in the loop)
  __syncthreads();  // all rings drained: the shared memory is reused below
  TR_STAMP(2);

  // Combine the warps: s_o [W][HROWS][D] f32.
  float* s_o = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = g + 8 * r;
    if (row < n_h) {
#pragma unroll
      for (int j = 0; j < DT; ++j)
        *reinterpret_cast<float2*>(s_o + (warp * HROWS + row) * D + j * 8 + 2 * t) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
      if (t == 0) {
        s_m[warp][row] = m_run[r];
        s_l[warp][row] = l;
      }
    }
  }
  __syncthreads();
  const int64_t head0 = int64_t(b) * p.n_head + h0;  // [batch, n_head] row of head h0
  for (int idx = threadIdx.x; idx < n_h * (D / 4); idx += THREADS) {
    const int i = idx / (D / 4), d = (idx % (D / 4)) * 4;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, s_m[w][i]);
    float lsum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float wt = exp2_mufu(s_m[w][i] - mx);
        lsum += s_l[w][i] * wt;
        const float4 v = *reinterpret_cast<const float4*>(s_o + (w * HROWS + i) * D + d);
        acc.x = fmaf(wt, v.x, acc.x);
        acc.y = fmaf(wt, v.y, acc.y);
        acc.z = fmaf(wt, v.z, acc.z);
        acc.w = fmaf(wt, v.w, acc.w);
      }
    }
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    acc = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    const float lse2 = lsum > 0.f ? mx + log2f(lsum) : -INFINITY;
    if (n_used == 1) {  // the only split: final output
      store_bf16x4(p.out + (head0 + i) * D + d, acc);
      if (p.lse && d == 0) p.lse[head0 + i] = lse2 * LN2;
    } else if constexpr (CL) {  // this split's partial, read by the cluster below: [HROWS][D] f32 + [HROWS] LSE
      float* s_part = s_o + W * HROWS * D;
      *reinterpret_cast<float4*>(s_part + i * D + d) = acc;
      if (d == 0) s_part[HROWS * D + i] = lse2;
    } else {
      const int64_t row = (head0 + i) * p.n_split + split;
      *reinterpret_cast<float4*>(p.o_part + row * D + d) = acc;
      if (d == 0) p.lse_part[row] = lse2;
    }
  }
  if (n_used == 1) return;

  if constexpr (CL) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    // barrier.cluster arrive (release) + wait (acquire): every split's partial is in its shared memory.
    cluster.sync();
    float* s_part = s_o + W * HROWS * D;
    // The (head, 4 dims) items are spread over the cluster's CTAs (rank = split: the cluster spans gridDim.x);
    // one pass with a running max over the splits' partials in DSMEM, in split order (deterministic).
    for (int idx = split + p.n_split * threadIdx.x; idx < n_h * (D / 4); idx += p.n_split * THREADS) {
      const int i = idx / (D / 4), d = (idx % (D / 4)) * 4;
      float m = -INFINITY, sum = 0.f;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
      for (int sp = 0; sp < n_used; ++sp) {
        const float* rp = cluster.map_shared_rank(s_part, sp);
        merge_split(rp[HROWS * D + i], *reinterpret_cast<const float4*>(rp + i * D + d), m, sum, acc);
      }
      store_merged<D>(p, head0 + i, d, m, sum, acc);
    }
    cluster.sync();  // no CTA may exit (freeing its shared memory) while another still reads it
    return;
  }

  // Publish the partial, then arrive; the last arrival combines all splits of this (sequence, kv head chunk).
  // arrive_last is one acquire-release atomic by thread 0: the first barrier orders the CTA's partial stores
  // before it, the second its acquire before the last CTA's partial loads (no fence by the other threads).
  TR_STAMP(3);
  __syncthreads();
  if (threadIdx.x == 0) s_last = arrive_last(p.counters + (int64_t(b) * gridDim.y + blockIdx.y), unsigned(n_used));
  __syncthreads();
  TR_STAMP(4);
  if (!s_last) {
    TR_STAMP(5);
    TR_STORE(0);
    return;
  }
  // One pass per (head, 4 dims) with a running max, so that every split's loads are independent instead of the
  // LSEs first and the outputs after: up to 16 splits' loads issued before the first merge (one round trip;
  // measured -0..-0.3 us against 8 per step, bench/RESULTS.md session 12), merged in split order.
  for (int idx = threadIdx.x; idx < n_h * (D / 4); idx += THREADS) {
    const int i = idx / (D / 4), d = (idx % (D / 4)) * 4;
    const int64_t row0 = (head0 + i) * p.n_split;
    float m = -INFINITY, sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int sp0 = 0; sp0 < n_used; sp0 += 16) {
      float l[16];
      float4 v[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        l[j] = -INFINITY;  // past n_used: merge_split skips it
        v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (sp0 + j < n_used) {
          l[j] = __ldcg(p.lse_part + row0 + sp0 + j);
          v[j] = __ldcg(reinterpret_cast<const float4*>(p.o_part + (row0 + sp0 + j) * D + d));
        }
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) merge_split(l[j], v[j], m, sum, acc);
    }
    store_merged<D>(p, head0 + i, d, m, sum, acc);
  }
  TR_STAMP(5);
  TR_STORE(1);
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
__global__ void __launch_bounds__(32 * W, 1) decode_kernel(const DecodeParams p) {
  decode_body<D, W, CPS, TWO, EARLY, CL, 0>(p, nullptr, nullptr);
}

// The TMA build (AttentionOptions::decode_tma): head dim 64, 4 warps, one CTA per SM, counter combine.
template <int TS, bool TWO, bool EARLY>
__global__ void __launch_bounds__(128, 1)
    decode_kernel_tma(const DecodeParams p, const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
  decode_body<64, 4, 1, TWO, EARLY, false, TS>(p, &tm_k, &tm_v);
}

}  // namespace
}  // namespace mk::cuda::attn
