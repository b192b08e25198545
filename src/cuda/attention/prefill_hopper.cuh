// FA3-style prefill kernel for sm_90a: one CTA per BM = 64 * NWG query rows of one head, NWG + 1 warpgroups.
// Warpgroup 0 is the producer (one warp: TMA loads of Q and of 128-key K/V tiles from the paged cache into a
// STAGES-deep shared-memory ring, completing on mbarriers); warpgroups 1..NWG are consumers of 64 query rows
// each: S = Q K^T and O += P V on wgmma (fp32 accumulate), online softmax in registers with the FA-4 switches
// (softmax_scores in attn_common.cuh). setmaxnreg moves registers from the producer to the consumers.
// Ping-pong (FA3): the consumers take turns issuing their GEMMs, in warpgroup order, through named barriers,
// so that one warpgroup's softmax runs while another's GEMMs occupy the tensor cores; inside a warpgroup,
// S(j) = Q K(j)^T and O += P(j-1) V(j-1) are in flight together while the softmax of S(j) runs.
// Paged KV: each 64-row chunk of a tile is one TMA box at pool row block_table[pos / bs] * bs + pos % bs; a
// chunk that runs past the sequence end is copied by the producer warp with plain loads and zero-filled
// (so that stale pool memory, possibly NaN, never meets a zero probability in P V).
// Epilogue: each consumer warpgroup writes its normalised output rows into its (free by then) rows of the Q buffer
// and stores them with one TMA per 64 columns (4-byte stores from the registers only for a ragged sequence's last
// rows): it halved the per-CTA epilogue (RESULTS.md, session 13 att4).
// Instantiated per head dim in prefill_hopper_d*.cu. Reference: cpu::attention_prefill.
// One CTA per work tile: persistent CTAs (one per SM looping over the tiles, static or dynamic order) measured
// 7-24% slower on the H200 (bench/RESULTS.md, prefill v7), so the hardware's CTA scheduling stays.
#pragma once
#include <cuda.h>

#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"
#include "cuda/attention/prefill_hopper_pipe.cuh"
#include "cuda/attention/trace_arm.cuh"
#include "cuda/attention/wgmma.cuh"
#include "cuda/common/device.cuh"

namespace mk::cuda::attn {

constexpr int HOP_BN = 128;  // keys per K/V tile
constexpr int HOP_BOX = 64;  // rows per K/V TMA box (16-row boxes: up to 10% slower, RESULTS.md session 12)

#ifndef MK_ATTN_Q_IN_REGS_D128
#define MK_ATTN_Q_IN_REGS_D128 1  // S = Q K^T with Q in registers at D=128 (0: SS wgmma; RESULTS.md, round 5)
#endif
// MK_PREFILL_TRACE = 1 (a diagnostic build of the prefill objects only, never the library's): per-CTA globaltimer
// stamps into the buffer armed by prefill_trace_arm_d64 / _d128 (attn_bench 'ptrace'). Record of CTA blockIdx.x,
// 8 words: [0] CTA entry, [1] Q landed (first consumer warpgroup), [2] its first S landed, [3] its K/V loop done,
// [4] its output stored, [5] the last warpgroup's output stored, [6] the last warpgroup's first S landed,
// [7] blockIdx.x | smid << 32 | n_tiles << 44 (n_tiles = 0xfffff: the CTA had no rows).
#ifndef MK_PREFILL_TRACE
#define MK_PREFILL_TRACE 0
#endif
#if MK_PREFILL_TRACE
static __device__ unsigned long long* g_ptrace;
static __device__ unsigned g_ptrace_cap;  // records
#define PTR_STAMP(k)                                                                                 \
  do {                                                                                               \
    if (g_ptrace && blockIdx.x < g_ptrace_cap) g_ptrace[8ull * blockIdx.x + (k)] = globaltimer_ns(); \
  } while (0)
#endif

// Tile shape, register split and shared-memory layout of one (head dim, consumer warpgroups) instance.
template <int D, int NWG>
struct HopperCfg {
  static constexpr int BM = 64 * NWG;              // query rows per CTA (64 per consumer warpgroup)
  static constexpr int THREADS = 128 * (NWG + 1);
  static constexpr int CONSUMER_WARPS = 4 * NWG;
  // Registers per thread after setmaxnreg: the producer warpgroup gives its share to the consumers
  // (NWG = 2: 24 + 2 x 240; NWG = 3: 24 + 3 x 160; the register file holds 65536).
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = NWG == 2 ? 240 : 160;
  static_assert(128 * PRODUCER_REGS + 128 * NWG * CONSUMER_REGS <= 65536, "register file budget");
  static_assert(NWG == 2 || NWG == 3, "2 or 3 consumer warpgroups (named barriers 1..NWG)");
  // K/V ring stages (6 at head dim 64 measured no faster than 4: RESULTS.md, session 12).
  static constexpr int STAGES = D == 64 ? 4 : 3;
  // S = Q K^T as an RS wgmma with this warpgroup's Q rows in registers (32 per thread at D=128), instead of SS
  // (Q re-read from shared memory by every Q K^T): cuts the shared-memory reads of Q K^T by a third. Measured
  // on the H200 (same call, ABBA): D=128 non-causal +2.6% (576 -> 591 TFLOP/s), causal within noise.
  static constexpr bool Q_IN_REGS = MK_ATTN_Q_IN_REGS_D128 && D == 128;
  // wgmma descriptors as one per tile and operand plus a constant offset per wgmma (wgmma_desc_at) instead of a full
  // descriptor per wgmma: the same operands, the head dim 64 ping-pong turn 104 -> 59 instructions. Measured on the
  // H200 (same call, ABBA, 16k B=2): D=64 +1.5% non-causal, +1.2% causal; D=128 -0.7% non-causal, +-0 causal, so
  // head dim 64 only (RESULTS.md, session 12 closing round).
  static constexpr bool DESC_AT = D == 64;
  static constexpr int ATOMS = D / 64;                     // 64-column (128-byte) swizzle atoms per row
  static constexpr int Q_BYTES = BM * D * 2;               // [ATOMS][BM rows][128 B]
  static constexpr int KV_BYTES = HOP_BN * D * 2;          // [ATOMS][128 rows][128 B]
  static constexpr int Q_OFF = 0;
  static constexpr int K_OFF = Q_BYTES;
  static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
  static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;  // q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  static constexpr int BYTES = BAR_OFF + 8 * (1 + 4 * STAGES) + 1024;  // + slack to align the base to 1024
  static_assert(BYTES <= 227 * 1024, "shared memory budget");
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "swizzle atoms must stay 1024-byte aligned");
};

// Pool row of the first key of this lane's HOP_BOX-row box of the K/V tile at key n0 (lanes < HOP_BN / HOP_BOX;
// a box never crosses a KV page: block sizes are multiples of 64), or -1 where the box is not whole inside kv_len
// (the warp copies it). The lanes read the block table at once, one entry each, and the row serves the K and the
// V tile. (Lane 0 reading one entry per box after an integer division, serially, for K and again for V, cost
// 4-5% at 128-key tiles and made 176-key tiles in 16-row boxes 2.8x slower: RESULTS.md, session 12.)
__device__ __forceinline__ int box_row(const PrefillParams& p, const int32_t* bt_row, int n0, int kv_len, int lane) {
  const int pos0 = n0 + lane * HOP_BOX;
  if (lane >= HOP_BN / HOP_BOX || pos0 + HOP_BOX > kv_len) return -1;
  return bt_row[pos0 / p.block_size] * p.block_size + pos0 % p.block_size;
}

// Producer warp: fills one [ATOMS][128][64] tile of K or V for keys [n0, n0 + 128), n0 < kv_len. Whole 64-row
// boxes go by TMA, each issued by its lane (row from box_row); in the sequence's last tile, the partial and
// empty boxes are copied by the warp's lanes (rows past kv_len zero-filled, so that stale pool memory, possibly
// NaN, never meets a zero probability) in the TMA's 128-byte swizzle, then made visible to the async proxy.
template <int D>
__device__ __forceinline__ void produce_tile(bf16* s_tile, uint64_t* full, const CUtensorMap* map, const bf16* pool,
                                             const PrefillParams& p, const int32_t* bt_row, int hk, int n0,
                                             int kv_len, int row, int lane) {
  constexpr int ATOMS = D / 64, BN = HOP_BN, CH = HOP_BOX;
  uint32_t bytes = BN * 128 * ATOMS;
  if (n0 + BN > kv_len) {
    const int n_whole = (kv_len - n0) / CH;  // boxes by TMA; the others are copied
    bytes = n_whole * CH * 128 * ATOMS;
#pragma unroll 1
    for (int c = n_whole; c < BN / CH; ++c) {
      const int pos0 = n0 + c * CH, n_valid = kv_len - pos0;  // may be <= 0: all zero
#pragma unroll 1
      for (int i = lane; i < CH * D / 8; i += 32) {  // 16-byte vectors: row r, vector v of the row
        const int r = i / (D / 8), v = i % (D / 8);
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r < n_valid)
          val = *reinterpret_cast<const uint4*>(pool + paged_row(bt_row, p.block_size, p.n_kv_head, D, pos0 + r, hk) +
                                                v * 8);
        const int atom = v / 8, chunk = (v % 8) ^ (r & 7);
        *reinterpret_cast<uint4*>(reinterpret_cast<char*>(s_tile) + atom * BN * 128 + (c * CH + r) * 128 +
                                  chunk * 16) = val;
      }
    }
    fence_proxy_async();  // plain stores above -> visible to wgmma (async proxy) after the barrier
  }
  __syncwarp();
  if (lane == 0) mbar_arrive_expect_tx(full, bytes);
  __syncwarp();  // the tile's byte count is armed before any of its boxes is issued
  if (row >= 0) {
#pragma unroll
    for (int a = 0; a < ATOMS; ++a)
      tma_load_3d(reinterpret_cast<char*>(s_tile) + a * BN * 128 + lane * CH * 128, map, full, a * 64, hk, row);
  }
}

// CTA order (1-D grid of n_m_blocks x units, unit = (sequence, head), head fastest). Both orders start with
// the heaviest row block (causal: the last, with the most key tiles). lpt_units == 0: unit by unit. Otherwise
// longest-processing-time first within sections of lpt_units units (whose K/V fit in L2): every unit's
// heaviest block, then every unit's next, ..., so that the light blocks fill the tail of the grid.
__device__ __forceinline__ void cta_tile(const PrefillParams& p, int n_m, int& m_block, int& h, int& b) {
  const int units = p.n_head * p.batch;
  const int lin = blockIdx.x;
  int u, m_rev;
  if (p.lpt_units > 0) {
    const int per_sec = n_m * p.lpt_units;
    const int sec = lin / per_sec, r = lin % per_sec;
    const int su = min(p.lpt_units, units - sec * p.lpt_units);
    m_rev = r / su;
    u = sec * p.lpt_units + r % su;
  } else {
    u = lin / n_m;
    m_rev = lin % n_m;
  }
  m_block = n_m - 1 - m_rev;
  h = u % p.n_head;
  b = u / p.n_head;
}

// Epilogue of a consumer warpgroup whose 64 rows all lie inside the sequence: the rows divided
// by their sums, in bf16, written by stmatrix into s_tile (this warpgroup's rows of the Q buffer, free by now: the
// TMA's [ATOMS][BM rows][128 B] layout with the 128-byte swizzle), then stored by one TMA per 64-column atom; the
// log-sum-exp as store_out_rows. bar_id: a named barrier of this warpgroup's 128 threads.
template <int D, int DT, int BM>
__device__ __forceinline__ void store_out_tile_tma(const CUtensorMap* tmap_o, float* lse, int n_head,
                                                   const float (&o)[DT][4], const float (&m_run)[2],
                                                   const float (&l_run)[2], const int (&row_in_seq)[2], int q0, int h,
                                                   int m0_wg, char* s_tile, int bar_id, int warp, int lane) {
  const int t = lane % 4;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.f ? 1.f / l : 0.f;
    if (lse && t == 0)
      lse[(int64_t(q0) + row_in_seq[r]) * n_head + h] = l > 0.f ? (m_run[r] + log2f(l)) * LN2 : -INFINITY;
  }
  // stmatrix x4 per pair of 8-column chunks (j, j + 1): matrices {rows 0-7, 8-15 of this warp's 16} x {j, j + 1};
  // lane l gives the address of row l % 8 (+ 8 for matrices 1 and 3) of chunk j + l / 16.
  const int r_l = warp * 16 + (lane % 8) + 8 * ((lane / 8) & 1);
  const uint32_t base = smem_u32(s_tile) + r_l * 128;
#pragma unroll
  for (int j = 0; j < DT; j += 2) {
    const int ch = j + lane / 16;
    stmatrix_x4(base + (ch / 8) * BM * 128 + (((ch % 8) ^ (r_l & 7)) * 16),
                pack_bf16(o[j][0] * inv[0], o[j][1] * inv[0]), pack_bf16(o[j][2] * inv[1], o[j][3] * inv[1]),
                pack_bf16(o[j + 1][0] * inv[0], o[j + 1][1] * inv[0]),
                pack_bf16(o[j + 1][2] * inv[1], o[j + 1][3] * inv[1]));
  }
  fence_proxy_async();  // this thread's shared-memory writes -> visible to the TMA (async proxy)
  named_bar_sync(bar_id, 128);
  if (warp == 0 && lane == 0) {
#pragma unroll
    for (int a = 0; a < D / 64; ++a) tma_store_3d(tmap_o, s_tile + a * BM * 128, a * 64, h, q0 + m0_wg);
    bulk_commit();
    bulk_wait_read_all();
  }
}

template <int D, int NWG, bool POLY>
__global__ void __launch_bounds__(HopperCfg<D, NWG>::THREADS, 1)
    prefill_hopper_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                          const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_o,
                          const PrefillParams p) {
  using L = HopperCfg<D, NWG>;
  constexpr int STAGES = L::STAGES, ATOMS = L::ATOMS, BM = L::BM, BN = HOP_BN;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* s_q = reinterpret_cast<bf16*>(smem + L::Q_OFF);
  auto s_k = [&](int st) { return reinterpret_cast<bf16*>(smem + L::K_OFF + st * L::KV_BYTES); };
  auto s_v = [&](int st) { return reinterpret_cast<bf16*>(smem + L::V_OFF + st * L::KV_BYTES); };
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::BAR_OFF);
  uint64_t* q_full = bars;
  uint64_t* k_full = bars + 1;
  uint64_t* v_full = k_full + STAGES;
  uint64_t* k_empty = v_full + STAGES;
  uint64_t* v_empty = k_empty + STAGES;

  int m_block, h, b;
#if MK_PREFILL_TRACE
  if (threadIdx.x == 0) PTR_STAMP(0);
#endif
  cta_tile(p, (p.max_seqlen_q + BM - 1) / BM, m_block, h, b);
  const int q0 = p.cu_seqlens_q[b], q_len = p.cu_seqlens_q[b + 1] - q0;
  const int m0 = m_block * BM;
#if MK_PREFILL_TRACE
  if (threadIdx.x == 0 && g_ptrace && blockIdx.x < g_ptrace_cap)
    g_ptrace[8ull * blockIdx.x + 7] = blockIdx.x | (unsigned long long)sm_id() << 32 | 0xfffffull << 44;
#endif
  if (m0 >= q_len) return;  // uniform for the CTA, before any barrier
  const int kv_len = min(p.seq_lens_k[b], p.kv_capacity);
  const int hk = h / p.group;
  const int diag = kv_len - q_len;
  int n_end = kv_len;
  if (p.causal) n_end = max(0, min(kv_len, min(q_len, m0 + BM) + diag));
  // Every consumer warpgroup runs all n_tiles (rows of a warpgroup past the causal limit are masked), so that
  // the ping-pong turns stay paired.
  const int n_tiles = (n_end + BN - 1) / BN;
  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
#if MK_PREFILL_TRACE
  if (threadIdx.x == 0 && g_ptrace && blockIdx.x < g_ptrace_cap)
    g_ptrace[8ull * blockIdx.x + 7] = blockIdx.x | (unsigned long long)sm_id() << 32 |
                                      (unsigned long long)(n_tiles & 0xfffff) << 44;
#endif

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], L::CONSUMER_WARPS);  // lane 0 of every consumer warp arrives once it has read the stage
      mbar_init(&v_empty[s], L::CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // barriers initialised before anyone waits on them

  const int wg = threadIdx.x / 128;
  if (wg == 0) {  // ---------------- producer ----------------
    setmaxnreg_dec<L::PRODUCER_REGS>();
    const int lane = threadIdx.x;
    if (lane < 32) {
      if (lane == 0) {
        mbar_arrive_expect_tx(q_full, L::Q_BYTES);
        for (int c = 0; c < BM / 64; ++c)
          for (int a = 0; a < ATOMS; ++a)
            tma_load_3d(reinterpret_cast<char*>(s_q) + a * BM * 128 + c * 64 * 128, &tmap_q, q_full, a * 64, h,
                        q0 + m0 + c * 64);
      }
#pragma unroll 1
      for (int it = 0; it < n_tiles; ++it) {
        const int st = it % STAGES;
        const uint32_t ph = (it / STAGES) & 1;
        const int n0 = it * BN;
        // This lane's box of the tile; the block-table read is in flight during the ring waits. (Reading it one
        // tile ahead measured the same: RESULTS.md, session 12.)
        const int row = box_row(p, bt_row, n0, kv_len, lane);
        mbar_wait(&k_empty[st], ph ^ 1);  // fresh barrier: parity 1 counts as completed
        produce_tile<D>(s_k(st), &k_full[st], &tmap_k, p.k, p, bt_row, hk, n0, kv_len, row, lane);
        mbar_wait(&v_empty[st], ph ^ 1);
        produce_tile<D>(s_v(st), &v_full[st], &tmap_v, p.v, p, bt_row, hk, n0, kv_len, row, lane);
      }
    }
    return;
  }
  // ---------------- consumers: warpgroup c handles query rows m0 + 64c .. +63 ----------------
  setmaxnreg_inc<L::CONSUMER_REGS>();
  const int c = wg - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  constexpr int NT = BN / 8, DT = D / 8;
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const int row_in_seq[2] = {m0 + c * 64 + warp * 16 + g, m0 + c * 64 + warp * 16 + g + 8};
  const int m0_wg = m0 + c * 64;
  // POLY = false: the default build with every exponential on MUFU; the FA-4 (a) switch and its unrolled
  // variants are compiled out (smaller loop body, fewer live registers).
  const int n_poly = POLY ? p.n_poly : 0;
  const uint32_t q_addr = smem_u32(s_q) + c * 64 * 128;

  // Ping-pong turns: warpgroup c issues its GEMMs after bar.sync on barrier 1 + c, then lets warpgroup c + 1
  // (mod NWG) go by bar.arrive on its barrier (each barrier: 128 syncing + 128 arriving threads). The last
  // warpgroup opens the first turn; warpgroup 0 consumes the last warpgroup's final arrive at the end, so that
  // every barrier phase is complete when the CTA exits. All warpgroups take the same number of turns.
  const bool pp = p.pingpong;
  auto turn_begin = [&] {
    if (pp) named_bar_sync(1 + c, 256);
  };
  auto turn_end = [&] {
    if (pp) named_bar_arrive(1 + (c + 1) % NWG, 256);
  };
  // The stage's reads by this warp are complete (after wgmma.wait_group): one arrive per warp.
  auto release = [&](uint64_t* bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  if (pp && c == NWG - 1) named_bar_arrive(1, 256);
  mbar_wait(q_full, 0);
#if MK_PREFILL_TRACE
  if (threadIdx.x == 128) PTR_STAMP(1);
#endif
  // Q in registers (L::Q_IN_REGS): A fragments of this warp's 16 rows, k-step kk: {row g, row g + 8} x
  // {columns 16kk + 2t, 16kk + 8 + 2t}, read from the TMA's 128-byte-swizzled tile (16-byte chunk ^ row % 8).
  uint32_t q_frag[L::Q_IN_REGS ? D / 16 : 1][4];
  if constexpr (L::Q_IN_REGS) {
    const unsigned char* qb = reinterpret_cast<const unsigned char*>(s_q);
    auto q_at = [&](int r, int col) {
      const int cc = col % 64;
      return *reinterpret_cast<const uint32_t*>(qb + (col / 64) * BM * 128 + r * 128 + (((cc / 8) ^ (r & 7)) * 16) +
                                                (cc % 8) * 2);
    };
    const int r0 = c * 64 + warp * 16 + g;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      q_frag[kk][0] = q_at(r0, kk * 16 + 2 * t);
      q_frag[kk][1] = q_at(r0 + 8, kk * 16 + 2 * t);
      q_frag[kk][2] = q_at(r0, kk * 16 + 8 + 2 * t);
      q_frag[kk][3] = q_at(r0 + 8, kk * 16 + 8 + 2 * t);
    }
  }

  // Descriptors (HopperCfg::DESC_AT): one per tile and operand plus an offset per wgmma, or a full one per wgmma.
  const uint64_t q_desc = wgmma_desc(q_addr, 16, 1024);
  auto issue_qk = [&](float (&sc)[NT][4], int st) {
    const uint32_t k_addr = smem_u32(s_k(st));
    const uint64_t k_desc = wgmma_desc(k_addr, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;  // atom, then 32 B per 16 columns
      const uint32_t koff = (kk / 4) * BN * 128 + (kk % 4) * 32;
      const uint64_t dk = L::DESC_AT ? wgmma_desc_at(k_desc, koff) : wgmma_desc(k_addr + koff, 16, 1024);
      if constexpr (L::Q_IN_REGS)
        wgmma_m64n128k16_rs_kmajor(sc, q_frag[kk], dk, kk > 0);
      else
        wgmma_m64n128k16_ss(sc, L::DESC_AT ? wgmma_desc_at(q_desc, qoff) : wgmma_desc(q_addr + qoff, 16, 1024), dk,
                            kk > 0);
    }
  };
  auto issue_pv = [&](const uint32_t (&pf)[NT / 2][4], int st) {
    const uint32_t v_addr = smem_u32(s_v(st));
    const uint64_t v_desc = wgmma_desc(v_addr, BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t voff = kk * 16 * 128;
      const uint64_t dv = L::DESC_AT ? wgmma_desc_at(v_desc, voff) : wgmma_desc(v_addr + voff, BN * 128, 1024);
      if constexpr (D == 64) wgmma_m64n64k16_rs(o, pf[kk], dv);
      else wgmma_m64n128k16_rs(o, pf[kk], dv);
    }
  };
  // A P V on its own (the loop without intra-warpgroup overlap, and the overlapped loop's last tile): wait for V,
  // take a turn, wait for the GEMM and hand the stage back.
  auto pv_alone = [&](const uint32_t (&pf)[NT / 2][4], int st, uint32_t ph) {
    mbar_wait(&v_full[st], ph);
    turn_begin();
    wgmma_fence();
    issue_pv(pf, st);
    wgmma_commit();
    turn_end();
    wgmma_wait<0>();
    fence_operands(o);
    release(&v_empty[st]);
  };
  auto mask = [&](float (&sc)[NT][4], int it) {
    const int n0 = it * BN;
    if (n0 + BN > kv_len || (p.causal && n0 + BN - 1 > m0_wg + diag)) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + j * 8 + 2 * t + (e & 1);
          const int lim = p.causal ? min(kv_len - 1, row_in_seq[e / 2] + diag) : kv_len - 1;
          if (key > lim) sc[j][e] = -INFINITY;
        }
    }
  };

  if (p.overlap && n_tiles > 0) {  // (n_tiles == 0: a sequence shorter than its queries; nothing to do)
    // Intra-warpgroup overlap (FA3): S(it) = Q K(it)^T and O += P(it-1) V(it-1) are in flight together; the
    // softmax of S(it) runs while P V still occupies the tensor cores; O's rescale waits for P V to land.
    // Causal: every warpgroup runs all n_tiles (its rows past the causal limit are masked), so that the ping-pong
    // turns stay paired. (v6 skipped the tiles a warpgroup's rows cannot see, with idle turns: measured 2-5%
    // slower on every shape, non-causal included, because of the loop's code; bench/RESULTS.md, round 5.)
    uint32_t p_frag[NT / 2][4];
    float alpha[2];
    {
      float s[NT][4];
      mbar_wait(&k_full[0], 0);
      turn_begin();
      wgmma_fence();
      issue_qk(s, 0);
      wgmma_commit();
      turn_end();
      wgmma_wait<0>();
      fence_operands(s);
#if MK_PREFILL_TRACE
      if (threadIdx.x == 128) PTR_STAMP(2);
      if (threadIdx.x == 128 * NWG) PTR_STAMP(6);
#endif
      release(&k_empty[0]);
      mask(s, 0);
      softmax_scores(s, m_run, l_run, alpha, p_frag, p.scale_log2, p.rescale_threshold, n_poly);  // o == 0
      fence_operands(p_frag);
    }
#pragma unroll 1
    for (int it = 1; it < n_tiles; ++it) {
      const int st = it % STAGES, st_prev = (it - 1) % STAGES;
      const uint32_t ph = (it / STAGES) & 1, ph_prev = ((it - 1) / STAGES) & 1;
      float s[NT][4];
      mbar_wait(&k_full[st], ph);  // data first, then the turn: a turn is never held while waiting for a load
      mbar_wait(&v_full[st_prev], ph_prev);
      turn_begin();
      wgmma_fence();
      issue_qk(s, st);
      wgmma_commit();
      issue_pv(p_frag, st_prev);
      wgmma_commit();
      turn_end();
      wgmma_wait<1>();  // S(it) has landed (groups retire in order); P V may still run
      release(&k_empty[st]);
      mask(s, it);
      // ptxas places the wait below (WARPGROUP.DEPBAR) above the exponentials, so only the row maxima run
      // under this warpgroup's P V; its exponentials run under the other warpgroups' GEMMs (ping-pong).
      // Forcing them above the wait (the K release made to depend on the row sums) measured 5-8% slower
      // (bench/RESULTS.md, v5).
      const bool rescale =
          softmax_scores<true>(s, m_run, l_run, alpha, p_frag, p.scale_log2, p.rescale_threshold, n_poly);
      wgmma_wait<0>();
      fence_operands(o);
      release(&v_empty[st_prev]);
      if (rescale) rescale_o(o, alpha);
      pack_p(s, p_frag);  // the previous P's registers are free now
    }
    pv_alone(p_frag, (n_tiles - 1) % STAGES, ((n_tiles - 1) / STAGES) & 1);
#if MK_PREFILL_TRACE
    if (threadIdx.x == 128) PTR_STAMP(3);
#endif
  } else {
#pragma unroll 1
    for (int it = 0; it < n_tiles; ++it) {
      const int st = it % STAGES;
      const uint32_t ph = (it / STAGES) & 1;
      float s[NT][4];
      mbar_wait(&k_full[st], ph);
      turn_begin();
      wgmma_fence();
      issue_qk(s, st);
      wgmma_commit();
      turn_end();
      wgmma_wait<0>();
      fence_operands(s);
      release(&k_empty[st]);
      mask(s, it);
      uint32_t p_frag[NT / 2][4];
      softmax_tile(s, o, m_run, l_run, p_frag, p.scale_log2, p.rescale_threshold, n_poly);
      pv_alone(p_frag, st, ph);
    }
  }
  if (pp && c == 0) named_bar_sync(1, 256);  // the last warpgroup's final arrive (see turn_begin)

  // The output: through shared memory and TMA where the warpgroup's 64 rows lie inside the sequence (measured
  // faster than 4-byte stores from the registers: RESULTS.md, session 13 att4), else from the registers.
  if (m0_wg + 64 <= q_len)
    store_out_tile_tma<D, DT, BM>(&tmap_o, p.lse, p.n_head, o, m_run, l_run, row_in_seq, q0, h, m0_wg,
                                  reinterpret_cast<char*>(s_q) + c * 64 * 128, 1 + NWG + c, warp, lane);
  else
    store_out_rows<D, DT>(p.out, p.lse, p.n_head, o, m_run, l_run, row_in_seq, q_len, q0, h, t);
#if MK_PREFILL_TRACE
  if (threadIdx.x == 128) PTR_STAMP(4);
  if (threadIdx.x == 128 * NWG) PTR_STAMP(5);
#endif
}

template <int D, int NWG, bool POLY>
cudaError_t launch_prefill_hopper_inst(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  using L = HopperCfg<D, NWG>;
  CUtensorMap mq, mk, mv, mo;
  cudaError_t e = make_tensor_map_3d(&mq, p.q, D, p.n_head, total_q);
  if (e == cudaSuccess) e = make_tensor_map_3d(&mk, p.k, D, p.n_kv_head, pool_rows, HOP_BOX);
  if (e == cudaSuccess) e = make_tensor_map_3d(&mv, p.v, D, p.n_kv_head, pool_rows, HOP_BOX);
  if (e == cudaSuccess) e = make_tensor_map_3d(&mo, p.out, D, p.n_head, total_q);
  if (e != cudaSuccess) return e;
  static bool attr_set = false;  // raise the dynamic shared-memory limit once per process (per instance)
  if (!attr_set) {
    e = cudaFuncSetAttribute(prefill_hopper_kernel<D, NWG, POLY>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             L::BYTES);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  const int64_t n_ctas = int64_t((p.max_seqlen_q + L::BM - 1) / L::BM) * p.n_head * p.batch;
  if (n_ctas > 0x7fffffff) return cudaErrorInvalidConfiguration;
  prefill_hopper_kernel<D, NWG, POLY><<<unsigned(n_ctas), L::THREADS, L::BYTES, s>>>(mq, mk, mv, mo, p);
  return cudaGetLastError();
}

// Instance for the FA-4 (a) setting: the lean instance (no polynomial variants, a smaller loop) when no fraction
// is asked for, else the POLY = true instance. Measured (RESULTS.md, session 12): lean at head dim 128 +1.8%
// non-causal (att, call 1); causal, in one call with both runs of each build ABBA, lean +4.0% over the POLY
// instance at fraction 0 (att2, call 1: 590 vs 568 TFLOP/s; att's earlier calls had lean 1-2% below, within
// their 6% spread). The POLY instance runs its exponentials before the warpgroup's own P V wait (the fraction
// switch's branches keep ptxas from hoisting the wait above them), the lean one after it.
template <int D, int NWG>
cudaError_t launch_prefill_hopper(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  if (p.n_poly == 0)
    return launch_prefill_hopper_inst<D, NWG, false>(p, total_q, pool_rows, s);
  return launch_prefill_hopper_inst<D, NWG, true>(p, total_q, pool_rows, s);
}

// prefill_trace_arm_d64 / _d128 (attn_internal.h): the record buffer of this file's instances (MK_PREFILL_TRACE).
static inline cudaError_t prefill_trace_arm_here(void* buf, size_t bytes) {
#if MK_PREFILL_TRACE
  return arm_trace_symbols(g_ptrace, g_ptrace_cap, buf, bytes);
#else
  (void)buf;
  (void)bytes;
  return cudaErrorNotSupported;
#endif
}

}  // namespace mk::cuda::attn
