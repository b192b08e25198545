// Split-KV decode attention (flash-decoding) over the paged cache, one query token per sequence, in ONE kernel.
// CTA = (split, kv head [x 16-head chunk], sequence), 4 warps. The split's keys are cut into tiles (64 keys at
// D=64, 32 at D=128: 16 KB of K+V; the 8-warp build halves them); warp w takes tiles w, w+4, ... and streams
// them through its own 3-stage cp.async ring in shared memory (no CTA barrier in the main loop; ~128 KB per SM
// in flight; one 192 KB CTA per SM). S = Q K^T and
// O += P V run on mma.sync m16n8k16 with the group's query heads as the 16 M rows, so one K/V load serves all
// of them (GQA). The warps combine in shared memory; with several splits each CTA writes a partial (O, LSE)
// and the last CTA of its (sequence, kv head) to arrive, found by a counter in the workspace, combines them:
// no second kernel. PDL: griddepcontrol.wait before the first global read, dependents released right after.
// Reference: cpu::attention_prefill with q_len = 1; test: tests/gpu/test_attention_decode.cu; measured figures
// and the remaining gap: bench/RESULTS.md ("Decode attention v3").
#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"

#include <cooperative_groups.h>

namespace mk::cuda::attn {
namespace {

constexpr int NS = 3;            // ring stages per warp (NS - 1 tiles in flight while one is computed)
constexpr int HROWS = 16;        // query heads per CTA (mma M)
constexpr unsigned long long CTR_MAGIC = 0xdec0de5au;  // high word of a valid arrival counter

// W warps per CTA (DECODE_WARPS = 4 by default; 8 = twice the warps with half-size tiles, same ring bytes).
// CPS = CTAs per SM the ring is sized for: 1 = 192 KB; 2 = 96 KB (half-size tiles), so that two CTAs fit on an
// SM: the next call's CTAs (PDL) can be resident and waiting while this call's still run.
template <int D, int W, int CPS>
__host__ __device__ constexpr int tile_keys() {  // 16 KB of K+V per tile with 4 warps, 8 KB with 8 or 2 CTAs/SM
  return (W == 4 && CPS == 1 ? 64 : 32) * 64 / D;
}
template <int D, int W, int CPS>
constexpr int smem_bytes() {  // W warps x NS stages x (K + V tile)
  return W * NS * 2 * tile_keys<D, W, CPS>() * D * 2;
}
static_assert(smem_bytes<64, 4, 1>() == 196608 && smem_bytes<128, 4, 1>() == 196608 &&
                  smem_bytes<64, 8, 1>() == 196608 && smem_bytes<128, 8, 1>() == 196608,
              "one 192 KB CTA per SM");
static_assert(smem_bytes<64, 4, 2>() == 98304 && smem_bytes<128, 4, 2>() == 98304, "two 96 KB CTAs per SM");

// MK_DECODE_TRACE = 1 (a diagnostic build of this file only, never the library's): thread 0 of every CTA
// stamps globaltimer at entry, after the PDL wait, after its K/V loop, after its partial is written, after the
// arrival and at its end, into the buffer armed by decode_trace_arm (bench/attention.cpp 'dectrace').
#ifndef MK_DECODE_TRACE
#define MK_DECODE_TRACE 0
#endif
#if MK_DECODE_TRACE
__device__ unsigned long long* g_trace;  // [tickets][8]: id word, then 6 stamps (ns) and 0
__device__ unsigned g_trace_ticket, g_trace_cap;
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define TR_STAMP(k) (tr_[k] = gtime())
// Tickets are taken at a CTA's end; call N + 1's CTAs end after their PDL wait, i.e. after call N completed, so
// every CTA of call N holds a smaller ticket than any of call N + 1.
#define TR_STORE(last)                                                                                       \
  do {                                                                                                       \
    if (threadIdx.x == 0 && g_trace) {                                                                       \
      const unsigned tk = atomicAdd(&g_trace_ticket, 1u);                                                    \
      if (tk < g_trace_cap) {                                                                                \
        unsigned smid;                                                                                       \
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));                                                    \
        unsigned long long* r = g_trace + 8ull * tk;                                                         \
        r[0] = blockIdx.x | (unsigned long long)blockIdx.y << 16 | (unsigned long long)smid << 32 |          \
               (unsigned long long)(last) << 48;                                                             \
        for (int k_ = 0; k_ < 6; ++k_) r[1 + k_] = tr_[k_];                                                  \
        r[7] = 0;                                                                                            \
      }                                                                                                      \
    }                                                                                                        \
  } while (0)
#else
#define TR_STAMP(k) ((void)0)
#define TR_STORE(last) ((void)0)
#endif

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ uint32_t ld_b32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Before the PDL wait, without the early-K/V contract: prefetch into L2 this warp's first n tiles of K and V
// (128-byte lines), so that DRAM works during the previous kernel's tail. seq_lens_k and the block table may be
// being written by that kernel: their values here only choose the lines (block indices clamped into the pool,
// so every address is inside the allocation); the kernel re-reads both after the wait (the wait's "memory"
// clobber keeps the compiler from reusing these loads) and L2 is coherent, so a stale choice only wastes a
// prefetch. Same split arithmetic as the kernel.
template <int D, int W, int TK>
__device__ __forceinline__ void prefetch_first_tiles(const DecodeParams& p, int b, int split, int hk, int warp,
                                                     int lane) {
  constexpr int LPR = D * 2 / 128;  // 128-byte lines per K/V row of one head
  if (p.kv_n_blocks <= 0) return;
  const int kv_len = max(0, min(p.seq_lens_k[b], p.kv_capacity));
  const int units = (kv_len + 63) / 64;
  const int per = max(1, (units + p.n_split - 1) / p.n_split);
  const int k_begin = split * per * 64, k_end = min(kv_len, k_begin + per * 64);
  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  const int64_t row_stride = int64_t(p.n_kv_head) * D;
  for (int i = 0; i < p.l2_prefetch_tiles; ++i) {
    const int key0 = k_begin + (warp + i * W) * TK;
    const int n_valid = min(TK, k_end - key0);
    if (n_valid <= 0) break;
    const int blk = min(max(bt_row[key0 / p.block_size], 0), p.kv_n_blocks - 1);
    const int64_t base = ((int64_t(blk) * p.block_size + key0 % p.block_size) * p.n_kv_head + hk) * D;
    for (int c = lane; c < n_valid * LPR; c += 32) {
      const int64_t off = base + (c / LPR) * row_stride + (c % LPR) * 64;
      prefetch_l2(p.k + off);
      prefetch_l2(p.v + off);
    }
  }
}

// Arrival on a (sequence, kv head) counter [CTR_MAGIC:32 | count:32]; returns true for the n-th arrival, which
// resets the word to MAGIC|0 for the next launch. Steady state: one atomicAdd (a compare-and-swap loop here
// serialised ~16 arrivals into ~8 us, measured). A word without the magic (the workspace's first use: fresh or
// poisoned) means the add landed on garbage: the arrival is redone by compare-and-swap, which replaces the
// garbage by MAGIC|1 (so that add is never counted) or counts on a word another arrival already replaced.
__device__ __forceinline__ bool arrive_last(unsigned long long* ctr, unsigned n) {
  unsigned long long v = atomicAdd(ctr, 1ull);
  unsigned count;
  if ((v >> 32) == CTR_MAGIC) {
    count = unsigned(v) + 1;
  } else {
    v += 1;  // the value our add left, the likeliest current one
    for (;;) {
      const unsigned long long nv = (v >> 32) == CTR_MAGIC ? v + 1 : (CTR_MAGIC << 32) | 1ull;
      const unsigned long long prev = atomicCAS(ctr, v, nv);
      if (prev == v) {
        count = unsigned(nv);
        break;
      }
      v = prev;
    }
  }
  if (count < n) return false;
  atomicExch(ctr, CTR_MAGIC << 32);
  return true;
}

__device__ __forceinline__ void store_bf16x4(bf16* dst, float4 v) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(dst) = u;
}

// TWO: the CTA has more than 8 query heads, so the mma rows g + 8 are live (else they are padding: skipped in
// the softmax, their P is zero). EARLY: the caller's contract (AttentionOptions::decode_early_kv) lets the
// kernel read seq_lens_k, the block table and every K/V row but the newest of each sequence before its PDL
// wait, so the first tiles stream while the previous kernel finishes. CL: the grid is launched in clusters of
// n_split CTAs (one cluster = the splits of one (sequence, kv head chunk)); the partials stay in shared memory
// and are combined through DSMEM after a cluster barrier (no workspace, fence or counter).
template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
__global__ void __launch_bounds__(32 * W, 1) decode_kernel(const DecodeParams p) {
  constexpr int THREADS = 32 * W;
  constexpr int TK = tile_keys<D, W, CPS>();
  constexpr int NT = TK / 8;       // 8-key column blocks of S
  constexpr int KSTEPS = D / 16;   // k-steps of Q K^T
  constexpr int DT = D / 8;        // 8-wide column blocks of O
  constexpr int CH = D / 8;        // 16-byte chunks per K/V row
  constexpr int STAGE = 2 * TK * D;  // elements: K tile [TK][D] then V tile [TK][D], rows swizzled
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ float s_m[W][HROWS], s_l[W][HROWS];
  __shared__ int s_last;

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
    griddep_wait();
    griddep_launch();
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

  // Q as mma A fragments: rows = query heads h0 + row (rows >= n_h are zero), columns = dims.
  uint32_t qf[KSTEPS][4];
  auto load_q = [&] {
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

  bf16* ring = reinterpret_cast<bf16*>(smem_raw) + warp * NS * STAGE;
  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  const int64_t row_stride = int64_t(p.n_kv_head) * D;
  // Issues this warp's i-th tile into stage i % NS; rows past k_end are zero-filled (never read from global).
  auto issue = [&](int i) {
    const int key0 = k_begin + (warp + i * W) * TK;
    const int n_valid = min(TK, k_end - key0);
    // A tile never straddles a pool block: key0 % TK == 0 and block_size % 64 == 0.
    const int64_t base = paged_row(bt_row, p.block_size, p.n_kv_head, D, key0, hk);
    bf16* sk = ring + (i % NS) * STAGE;
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
    // it); this warp's tiles come in key order, so they form a prefix.
#pragma unroll
    for (; n_pre < NS - 1 && n_pre < my_tiles; ++n_pre) {
      if (min(k_end, k_begin + (warp + n_pre * W) * TK + TK) > kv_len - 1) break;
      issue(n_pre);
      cp_async_commit();
    }
    griddep_wait();  // q, the workspace and the newest K/V row are read / written only after this
    griddep_launch();
    TR_STAMP(1);
    load_q();
  }
#pragma unroll
  for (int i = 0; i < NS - 1; ++i) {
    if (i < n_pre) continue;
    if (i < my_tiles) issue(i);
    cp_async_commit();
  }

  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max (log2 units, scaled) of rows g, g + 8
  float l_run[2] = {0.f, 0.f};              // this thread's partial row sums

  for (int i = 0; i < my_tiles; ++i) {
    if (i + NS - 1 < my_tiles) issue(i + NS - 1);  // into the stage computed in iteration i - 1
    cp_async_commit();
    cp_async_wait<NS - 1>();  // tile i has landed (for this lane) ...
    __syncwarp();             // ... and for every lane of the warp
    const bf16* sk = ring + (i % NS) * STAGE;
    const bf16* sv = sk + TK * D;
    float s[NT][4];
    warp_qk<D>(s, qf, sk, lane);
    const int key0 = k_begin + (warp + i * W) * TK;
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
  cp_async_wait<0>();
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
        const float l = rp[HROWS * D + i];
        const float4 v = *reinterpret_cast<const float4*>(rp + i * D + d);
        if (l == -INFINITY) continue;
        const float m_new = fmaxf(m, l);
        const float a = exp2_mufu(m - m_new);
        const float w = exp2_mufu(l - m_new);
        sum = fmaf(sum, a, w);
        acc.x = fmaf(acc.x, a, w * v.x);
        acc.y = fmaf(acc.y, a, w * v.y);
        acc.z = fmaf(acc.z, a, w * v.z);
        acc.w = fmaf(acc.w, a, w * v.w);
        m = m_new;
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      store_bf16x4(p.out + (head0 + i) * D + d, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
      if (p.lse && d == 0) p.lse[head0 + i] = sum > 0.f ? (m + log2f(sum)) * LN2 : -INFINITY;
    }
    cluster.sync();  // no CTA may exit (freeing its shared memory) while another still reads it
    return;
  }

  // Publish the partial, then arrive; the last arrival combines all splits of this (sequence, kv head chunk).
  TR_STAMP(3);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = arrive_last(p.counters + (int64_t(b) * gridDim.y + blockIdx.y), unsigned(n_used));
  __syncthreads();
  TR_STAMP(4);
  if (!s_last) {
    TR_STAMP(5);
    TR_STORE(0);
    return;
  }
  __threadfence();
  // One pass per (head, 4 dims) with a running max, so that every split's loads are independent (in flight
  // together, 8 per unrolled step) instead of the LSEs first and the outputs after.
  for (int idx = threadIdx.x; idx < n_h * (D / 4); idx += THREADS) {
    const int i = idx / (D / 4), d = (idx % (D / 4)) * 4;
    const int64_t row0 = (head0 + i) * p.n_split;
    float m = -INFINITY, sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int sp = 0; sp < n_used; ++sp) {
      const float l = __ldcg(p.lse_part + row0 + sp);
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.o_part + (row0 + sp) * D + d));
      if (l == -INFINITY) continue;  // a split without keys (not produced by this kernel; defensive)
      const float m_new = fmaxf(m, l);
      const float a = exp2_mufu(m - m_new);  // 0 on the first split (m = -inf)
      const float w = exp2_mufu(l - m_new);
      sum = fmaf(sum, a, w);
      acc.x = fmaf(acc.x, a, w * v.x);
      acc.y = fmaf(acc.y, a, w * v.y);
      acc.z = fmaf(acc.z, a, w * v.z);
      acc.w = fmaf(acc.w, a, w * v.w);
      m = m_new;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    store_bf16x4(p.out + (head0 + i) * D + d, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    if (p.lse && d == 0) p.lse[head0 + i] = sum > 0.f ? (m + log2f(sum)) * LN2 : -INFINITY;
  }
  TR_STAMP(5);
  TR_STORE(1);
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaError_t set_attrs() {
  constexpr int smem = smem_bytes<D, W, CPS>();
  static bool attr_set = false;  // raise the dynamic shared-memory limit (and allow 16-CTA clusters) once
  if (!attr_set) {
    const auto k = decode_kernel<D, W, CPS, TWO, EARLY, CL>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess && CL) e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  return cudaSuccess;
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaLaunchConfig_t make_cfg(const DecodeParams& p, cudaStream_t s, bool pdl, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(p.n_split, p.n_kv_head * ((p.group + HROWS - 1) / HROWS), p.batch);
  cfg.blockDim = dim3(32 * W);
  cfg.dynamicSmemBytes = smem_bytes<D, W, CPS>();
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (CL) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = unsigned(p.n_split);
    attr[1].val.clusterDim.y = attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  return cfg;
}

// Clusters of n_split (2 .. 16) CTAs of this build that the device holds at once, cached per split count.
template <int D, int CPS, bool TWO, bool EARLY>
int cluster_cap(int n_split) {
  static int cap[17] = {};  // cap + 1; 0 = not yet queried
  if (n_split < 2 || n_split > 16) return 0;
  if (cap[n_split] == 0) {
    int n = 0;
    if (set_attrs<D, 4, CPS, TWO, EARLY, true>() == cudaSuccess) {
      DecodeParams p{};
      p.n_split = n_split;
      p.n_kv_head = p.group = p.batch = 1;
      cudaLaunchAttribute attr[2];
      const cudaLaunchConfig_t cfg = make_cfg<D, 4, CPS, TWO, EARLY, true>(p, nullptr, true, attr);
      if (cudaOccupancyMaxActiveClusters(&n, decode_kernel<D, 4, CPS, TWO, EARLY, true>, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();  // a refused query is not a launch error: fall back to the counter combine
        n = 0;
      }
    }
    cap[n_split] = n + 1;
  }
  return cap[n_split] - 1;
}

int sm_count_here() {
  static int n = 0;
  if (n == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 1;
  }
  return n;
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaError_t launch_t(const DecodeParams& p, cudaStream_t s, bool pdl) {
  if constexpr (CL) {
    // Use clusters only where one wave of them fits (else the counter combine: a cluster that must wait for a
    // whole GPC's worth of free SMs would add a wave) or the grid is several waves anyway.
    const int cap = cluster_cap<D, CPS, TWO, EARLY>(p.n_split);
    const int64_t clusters = int64_t(p.n_kv_head) * ((p.group + HROWS - 1) / HROWS) * p.batch;
    const int64_t slots = int64_t(sm_count_here()) * CPS;
    if (cap <= 0 || (cap < clusters && int64_t(cap) * p.n_split * 8 < slots * 7))
      return launch_t<D, W, CPS, TWO, EARLY, false>(p, s, pdl);
  }
  const cudaError_t e = set_attrs<D, W, CPS, TWO, EARLY, CL>();
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = make_cfg<D, W, CPS, TWO, EARLY, CL>(p, s, pdl, attr);
  return cudaLaunchKernelEx(&cfg, decode_kernel<D, W, CPS, TWO, EARLY, CL>, p);
}

template <int D, int W, int CPS, bool EARLY, bool CL = false>
cudaError_t launch_two(const DecodeParams& p, cudaStream_t s, bool pdl) {
  return p.group > 8 ? launch_t<D, W, CPS, true, EARLY, CL>(p, s, pdl) : launch_t<D, W, CPS, false, EARLY, CL>(p, s, pdl);
}

template <int D, int CPS>
cudaError_t launch_w4(const DecodeParams& p, cudaStream_t s, const DecodeLaunch& l) {
  const bool cl = l.cluster && p.n_split >= 2 && p.n_split <= 16;
  if (cl) return l.early_kv ? launch_two<D, 4, CPS, true, true>(p, s, l.pdl) : launch_two<D, 4, CPS, false, true>(p, s, l.pdl);
  return l.early_kv ? launch_two<D, 4, CPS, true>(p, s, l.pdl) : launch_two<D, 4, CPS, false>(p, s, l.pdl);
}

template <int D>
cudaError_t launch_d(const DecodeParams& p, cudaStream_t s, const DecodeLaunch& l) {
  if (l.warps == 8) return launch_two<D, 8, 1, false>(p, s, l.pdl);  // (no EARLY build: a measured variant only)
  return l.ctas_per_sm == 2 ? launch_w4<D, 2>(p, s, l) : launch_w4<D, 1>(p, s, l);
}

}  // namespace

cudaError_t launch_decode(const DecodeParams& p, int head_dim, cudaStream_t s, const DecodeLaunch& l) {
  return head_dim == 64 ? launch_d<64>(p, s, l) : launch_d<128>(p, s, l);
}

cudaError_t decode_trace_arm(void* buf, size_t bytes) {
#if MK_DECODE_TRACE
  unsigned long long* ptr = static_cast<unsigned long long*>(buf);
  const unsigned cap = unsigned(bytes / 64), zero = 0;
  cudaError_t e = cudaMemcpyToSymbol(g_trace, &ptr, sizeof(ptr));
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_trace_cap, &cap, sizeof(cap));
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_trace_ticket, &zero, sizeof(zero));
  return e;
#else
  (void)buf;
  (void)bytes;
  return cudaErrorNotSupported;
#endif
}

int decode_cluster_capacity(int head_dim, int n_split, int ctas_per_sm, bool two_rows) {
  if (head_dim == 64)
    return ctas_per_sm == 2 ? (two_rows ? cluster_cap<64, 2, true, false>(n_split) : cluster_cap<64, 2, false, false>(n_split))
                            : (two_rows ? cluster_cap<64, 1, true, false>(n_split) : cluster_cap<64, 1, false, false>(n_split));
  return ctas_per_sm == 2 ? (two_rows ? cluster_cap<128, 2, true, false>(n_split) : cluster_cap<128, 2, false, false>(n_split))
                          : (two_rows ? cluster_cap<128, 1, true, false>(n_split) : cluster_cap<128, 1, false, false>(n_split));
}

}  // namespace mk::cuda::attn
