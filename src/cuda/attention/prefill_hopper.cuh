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
// Instantiated per head dim in prefill_hopper_d*.cu. Reference: cpu::attention_prefill.
#pragma once
#include <cuda.h>

#include <algorithm>

#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"
#include "cuda/attention/prefill_hopper_pipe.cuh"
#include "cuda/attention/prefill_hopper_tile.cuh"
#include "cuda/attention/wgmma.cuh"

namespace mk::cuda::attn {

#ifndef MK_ATTN_Q_IN_REGS_D128
#define MK_ATTN_Q_IN_REGS_D128 1  // S = Q K^T with Q in registers at D=128 (0: SS wgmma; RESULTS.md, round 5)
#endif

// Tile shape, register split and shared-memory layout of one (head dim, consumer warpgroups) instance.
template <int D, int NWG>
struct HopperCfg {
  static constexpr int BM = 64 * NWG;              // query rows per CTA (64 per consumer warpgroup)
  static constexpr int THREADS = 128 * (NWG + 1);
  static constexpr int CONSUMER_WARPS = 4 * NWG;
  // Registers per thread after setmaxnreg: the producer warpgroup gives its share to the consumers
  // (NWG = 2: 24 + 2 x 240 from 168 at launch; NWG = 3: 32 + 3 x 160 from 128; the register file holds 65536).
  static constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32;
  static constexpr int CONSUMER_REGS = NWG == 2 ? 240 : 160;
  static_assert(128 * PRODUCER_REGS + 128 * NWG * CONSUMER_REGS <= 65536, "register file budget");
  static_assert(NWG == 2 || NWG == 3, "2 or 3 consumer warpgroups (named barriers 1..NWG)");
  static constexpr int STAGES = D == 64 ? 4 : 3;
  // S = Q K^T as an RS wgmma with this warpgroup's Q rows in registers (32 per thread at D=128), instead of SS
  // (Q re-read from shared memory by every Q K^T): cuts the shared-memory reads of Q K^T by a third. Measured
  // on the H200 (same call, ABBA): D=128 non-causal +2.6% (576 -> 591 TFLOP/s), causal within noise.
  static constexpr bool Q_IN_REGS = MK_ATTN_Q_IN_REGS_D128 && D == 128;
  static constexpr int ATOMS = D / 64;                     // 64-column (128-byte) swizzle atoms per row
  static constexpr int Q_BYTES = BM * D * 2;               // [ATOMS][BM rows][128 B]
  static constexpr int KV_BYTES = HOP_BN * D * 2;          // [ATOMS][128 rows][128 B]
  static constexpr int Q_OFF = 0;
  static constexpr int K_OFF = Q_BYTES;
  static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
  // q_full, k_full[S], v_full[S], k_empty[S], v_empty[S], q_empty
  static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
  static constexpr int WORK_OFF = BAR_OFF + 8 * (2 + 4 * STAGES);  // int[2]: persistent work tile handed over
  static constexpr int BYTES = WORK_OFF + 8 + 1024;                   // + slack to align the base to 1024
  static_assert(BYTES <= 227 * 1024, "shared memory budget");
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "swizzle atoms must stay 1024-byte aligned");
};

template <int D, int NWG, bool POLY, bool PERSIST>
__global__ void __launch_bounds__(HopperCfg<D, NWG>::THREADS, 1)
    prefill_hopper_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                          const __grid_constant__ CUtensorMap tmap_v, const PrefillParams p) {
  using L = HopperCfg<D, NWG>;
  constexpr int STAGES = L::STAGES, ATOMS = L::ATOMS, BM = L::BM;
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
  uint64_t* q_empty = v_empty + STAGES;  // persistent: Q's buffer read by every consumer warp, may be reloaded
  volatile int* s_work = reinterpret_cast<volatile int*>(smem + L::WORK_OFF);  // [2]: tile of Q phase 0 / 1, -1 = end

  const int n_m = (p.max_seqlen_q + BM - 1) / BM;
  const int n_work = n_m * p.n_head * p.batch;
  if constexpr (!PERSIST) {
    if (work_tile<BM>(p, n_m, blockIdx.x).empty) return;  // uniform for the CTA, before any barrier
  }

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, L::CONSUMER_WARPS);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], L::CONSUMER_WARPS);  // lane 0 of every consumer warp arrives once it has read the stage
      mbar_init(&v_empty[s], L::CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // barriers initialised before anyone waits on them

  // Ring position and phase: K/V tile g (counted over all work tiles of this CTA) uses stage g % STAGES, and
  // its barriers complete for the (g / STAGES)-th time. Q: work tile number n_done, phase n_done & 1.
  const int wg = threadIdx.x / 128;
  if (wg == 0) {  // ---------------- producer ----------------
    setmaxnreg_dec<L::PRODUCER_REGS>();
    const int lane = threadIdx.x;
    if (lane < 32) {
      int g = 0, n_done = 0;
#pragma unroll 1
      for (int k = 0;; ++k) {
        const int lin = PERSIST ? work_index(p, k, n_work, lane) : (k == 0 ? int(blockIdx.x) : n_work);
        if (lin >= n_work) {
          if (PERSIST && lane == 0) {  // the end, handed over like a tile (the slot is free once Q is)
            mbar_wait(q_empty, (n_done & 1) ^ 1);
            s_work[n_done & 1] = -1;
            mbar_arrive(q_full);
          }
          break;
        }
        const WorkTile w = work_tile<BM>(p, n_m, lin);
        if (w.empty) continue;
        if (lane == 0) {
          if constexpr (PERSIST) {
            mbar_wait(q_empty, (n_done & 1) ^ 1);  // the previous tile's Q (and its slot) have been read
            s_work[n_done & 1] = lin;              // published by the arrive below (release / acquire)
          }
          mbar_arrive_expect_tx(q_full, L::Q_BYTES);
          for (int c = 0; c < BM / 64; ++c)
            for (int a = 0; a < ATOMS; ++a)
              tma_load_3d(reinterpret_cast<char*>(s_q) + a * BM * 128 + c * 64 * 128, &tmap_q, q_full, a * 64, w.h,
                          w.q0 + w.m0 + c * 64);
        }
        ++n_done;
#pragma unroll 1
        for (int it = 0; it < w.n_tiles; ++it, ++g) {
          const int st = g % STAGES;
          const uint32_t ph = (g / STAGES) & 1;
          mbar_wait(&k_empty[st], ph ^ 1);  // fresh barrier: parity 1 counts as completed
          produce_tile<D>(s_k(st), &k_full[st], &tmap_k, p.k, p, w.bt_row, w.hk, it * HOP_BN, w.kv_len, lane);
          mbar_wait(&v_empty[st], ph ^ 1);
          produce_tile<D>(s_v(st), &v_full[st], &tmap_v, p.v, p, w.bt_row, w.hk, it * HOP_BN, w.kv_len, lane);
        }
      }
    }
    return;
  }
  // ---------------- consumers: warpgroup c handles query rows m0 + 64c .. +63 of each work tile ----------------
  setmaxnreg_inc<L::CONSUMER_REGS>();
  const int c = wg - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  constexpr int NT = HOP_BN / 8, DT = D / 8;
  // POLY = false: the default build with every exponential on MUFU; the FA-4 (a) switch and its unrolled
  // variants are compiled out (smaller loop body, fewer live registers).
  const int n_poly = POLY ? p.n_poly : 0;
  const uint32_t q_addr = smem_u32(s_q) + c * 64 * 128;

  // Ping-pong turns: warpgroup c issues its GEMMs after bar.sync on barrier 1 + c, then lets warpgroup c + 1
  // (mod NWG) go by bar.arrive on its barrier (each barrier: 128 syncing + 128 arriving threads). The last
  // warpgroup opens the first turn; warpgroup 0 consumes the last warpgroup's final arrive at the end, so that
  // every barrier phase is complete when the CTA exits. All warpgroups take the same number of turns (per work
  // tile, so the turns stay paired across the tiles of a persistent CTA).
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

  auto issue_qk = [&](float (&sc)[NT][4], const uint32_t (&qf)[L::Q_IN_REGS ? D / 16 : 1][4], int st) {
    const uint32_t k_addr = smem_u32(s_k(st));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;  // atom, then 32 B per 16 columns
      const uint32_t koff = (kk / 4) * HOP_BN * 128 + (kk % 4) * 32;
      if constexpr (L::Q_IN_REGS)
        wgmma_m64n128k16_rs_kmajor(sc, qf[kk], wgmma_desc(k_addr + koff, 16, 1024), kk > 0);
      else
        wgmma_m64n128k16_ss(sc, wgmma_desc(q_addr + qoff, 16, 1024), wgmma_desc(k_addr + koff, 16, 1024), kk > 0);
    }
  };

  int g_base = 0, n_done = 0;  // K/V tiles and work tiles consumed before this one (ring and Q phases)
#pragma unroll 1
  for (int k = 0;; ++k) {
    int lin = k == 0 ? int(blockIdx.x) : n_work;  // one CTA per tile: no hand-over
    if constexpr (PERSIST) {
      mbar_wait(q_full, n_done & 1);
      lin = s_work[n_done & 1];
      if (lin < 0) break;
    }
    if (lin >= n_work) break;
    const WorkTile w = work_tile<BM>(p, n_m, lin);
    if (!PERSIST && w.empty) continue;
    const int n_tiles = w.n_tiles, kv_len = w.kv_len, diag = w.diag;
    float o[DT][4];
#pragma unroll
    for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    const int row_in_seq[2] = {w.m0 + c * 64 + warp * 16 + g, w.m0 + c * 64 + warp * 16 + g + 8};
    const int m0_wg = w.m0 + c * 64;
    if constexpr (!PERSIST) mbar_wait(q_full, n_done & 1);
    ++n_done;
    // Q in registers (L::Q_IN_REGS): A fragments of this warp's 16 rows, k-step kk: {row g, row g + 8} x
    // {columns 16kk + 2t, 16kk + 8 + 2t}, read from the TMA's 128-byte-swizzled tile (16-byte chunk ^ row % 8).
    // Then the Q buffer is free for the next work tile's load (persistent).
    uint32_t q_frag[L::Q_IN_REGS ? D / 16 : 1][4];
    if constexpr (L::Q_IN_REGS) {
      const unsigned char* qb = reinterpret_cast<const unsigned char*>(s_q);
      auto q_at = [&](int r, int col) {
        const int cc = col % 64;
        return *reinterpret_cast<const uint32_t*>(qb + (col / 64) * BM * 128 + r * 128 +
                                                  (((cc / 8) ^ (r & 7)) * 16) + (cc % 8) * 2);
      };
      const int r0 = c * 64 + warp * 16 + g;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        q_frag[kk][0] = q_at(r0, kk * 16 + 2 * t);
        q_frag[kk][1] = q_at(r0 + 8, kk * 16 + 2 * t);
        q_frag[kk][2] = q_at(r0, kk * 16 + 8 + 2 * t);
        q_frag[kk][3] = q_at(r0 + 8, kk * 16 + 8 + 2 * t);
      }
      if constexpr (PERSIST) {
        fence_proxy_async();  // these generic reads of Q before the producer's next TMA write (async proxy)
        release(q_empty);
      }
    }
    auto stage = [&](int it) { return (g_base + it) % STAGES; };
    auto phase = [&](int it) { return uint32_t((g_base + it) / STAGES) & 1; };

    auto issue_pv = [&](const uint32_t (&pf)[NT / 2][4], int st) {
      const uint32_t v_addr = smem_u32(s_v(st));
#pragma unroll
      for (int kk = 0; kk < HOP_BN / 16; ++kk) {
        const uint64_t dv = wgmma_desc(v_addr + kk * 16 * 128, HOP_BN * 128, 1024);
        if constexpr (D == 64) wgmma_m64n64k16_rs(o, pf[kk], dv);
        else wgmma_m64n128k16_rs(o, pf[kk], dv);
      }
    };
    // A P V on its own (the loop without intra-warpgroup overlap, and the overlapped loop's last tile): wait for
    // V, take a turn, wait for the GEMM and hand the stage back.
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
      const int n0 = it * HOP_BN;
      if (n0 + HOP_BN > kv_len || (p.causal && n0 + HOP_BN - 1 > m0_wg + diag)) {
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
      // Causal: every warpgroup runs all n_tiles (its rows past the causal limit are masked), so that the
      // ping-pong turns stay paired. (v6 skipped the tiles a warpgroup's rows cannot see, with idle turns:
      // measured 2-5% slower on every shape, non-causal included, because of the loop's code; RESULTS, round 5.)
      uint32_t p_frag[NT / 2][4];
      float alpha[2];
      {
        float s[NT][4];
        mbar_wait(&k_full[stage(0)], phase(0));
        turn_begin();
        wgmma_fence();
        issue_qk(s, q_frag, stage(0));
        wgmma_commit();
        turn_end();
        wgmma_wait<0>();
        fence_operands(s);
        release(&k_empty[stage(0)]);
        mask(s, 0);
        softmax_scores(s, m_run, l_run, alpha, p_frag, p.scale_log2, p.rescale_threshold, n_poly);  // o == 0
        fence_operands(p_frag);
      }
#pragma unroll 1
      for (int it = 1; it < n_tiles; ++it) {
        const int st = stage(it), st_prev = stage(it - 1);
        const uint32_t ph = phase(it), ph_prev = phase(it - 1);
        float s[NT][4];
        mbar_wait(&k_full[st], ph);  // data first, then the turn: a turn is never held while waiting for a load
        mbar_wait(&v_full[st_prev], ph_prev);
        turn_begin();
        wgmma_fence();
        issue_qk(s, q_frag, st);
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
      if constexpr (PERSIST && !L::Q_IN_REGS) release(q_empty);  // every Q K^T of this tile has completed
      pv_alone(p_frag, stage(n_tiles - 1), phase(n_tiles - 1));
    } else {
#pragma unroll 1
      for (int it = 0; it < n_tiles; ++it) {
        const int st = stage(it);
        const uint32_t ph = phase(it);
        float s[NT][4];
        mbar_wait(&k_full[st], ph);
        turn_begin();
        wgmma_fence();
        issue_qk(s, q_frag, st);
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
      if constexpr (PERSIST && !L::Q_IN_REGS) release(q_empty);
    }
    g_base += n_tiles;

    // Epilogue (persistent: the producer is already loading the next tile's Q and first K/V stages).
    const int64_t q_row_stride = int64_t(p.n_head) * D;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = row_in_seq[r];
      if (row >= w.q_len) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* out_row = p.out + (int64_t(w.q0) + row) * q_row_stride + int64_t(w.h) * D;
#pragma unroll
      for (int j = 0; j < DT; ++j)
        *reinterpret_cast<__nv_bfloat162*>(out_row + j * 8 + 2 * t) =
            __floats2bfloat162_rn(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
      if (p.lse && t == 0)
        p.lse[(int64_t(w.q0) + row) * p.n_head + w.h] = l > 0.f ? (m_run[r] + log2f(l)) * LN2 : -INFINITY;
    }
  }
  if (pp && c == 0) named_bar_sync(1, 256);  // the last warpgroup's final arrive (see turn_begin)
}

template <int D, int NWG, bool POLY, bool PERSIST>
cudaError_t launch_prefill_hopper_inst(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  using L = HopperCfg<D, NWG>;
  CUtensorMap mq, mk, mv;
  cudaError_t e = make_tensor_map_3d(&mq, p.q, D, p.n_head, total_q);
  if (e == cudaSuccess) e = make_tensor_map_3d(&mk, p.k, D, p.n_kv_head, pool_rows);
  if (e == cudaSuccess) e = make_tensor_map_3d(&mv, p.v, D, p.n_kv_head, pool_rows);
  if (e != cudaSuccess) return e;
  static bool attr_set = false;  // raise the dynamic shared-memory limit once per process (per instance)
  if (!attr_set) {
    e = cudaFuncSetAttribute(prefill_hopper_kernel<D, NWG, POLY, PERSIST>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  const int64_t n_work = int64_t((p.max_seqlen_q + L::BM - 1) / L::BM) * p.n_head * p.batch;
  if (n_work > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const int64_t n_ctas = PERSIST ? std::min<int64_t>(n_work, p.persistent_ctas) : n_work;
  prefill_hopper_kernel<D, NWG, POLY, PERSIST><<<unsigned(n_ctas), L::THREADS, L::BYTES, s>>>(mq, mk, mv, p);
  return cudaGetLastError();
}

// Instance for the FA-4 (a) setting and the schedule. Head dim 64: the lean instance (no polynomial variants)
// when no fraction is asked for; head dim 128 always runs the POLY = true instance (with the fraction 0 at run
// time): in one call on the H200 the lean instance measured +1.5% causal at 64 but -2.5% non-causal at 128
// (RESULTS, round 5). Persistent CTAs (p.persistent_ctas > 0): the default instances only (d64: lean, 3
// consumer warpgroups; d128), the others one CTA per work tile.
template <int D, int NWG>
cudaError_t launch_prefill_hopper(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  const bool persist = p.persistent_ctas > 0;
  if constexpr (D == 64) {
    if (p.n_poly == 0) {
      if constexpr (NWG == 3)
        if (persist) return launch_prefill_hopper_inst<D, NWG, false, true>(p, total_q, pool_rows, s);
      return launch_prefill_hopper_inst<D, NWG, false, false>(p, total_q, pool_rows, s);
    }
  } else {
    if (persist) return launch_prefill_hopper_inst<D, NWG, true, true>(p, total_q, pool_rows, s);
  }
  return launch_prefill_hopper_inst<D, NWG, true, false>(p, total_q, pool_rows, s);
}

}  // namespace mk::cuda::attn
