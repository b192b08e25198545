// Work tiles of the FA3-style Hopper prefill kernel (prefill_hopper.cuh): the order in which (row block, head,
// sequence) tiles are taken (longest first), the persistent schedule over them, each tile's extent (query rows,
// key tiles, causal limit), and the producer warp's fill of one K or V tile from the paged cache.
#pragma once
#include <cuda.h>

#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"
#include "cuda/attention/prefill_hopper_pipe.cuh"

namespace mk::cuda::attn {

constexpr int HOP_BN = 128;  // keys per tile

// Producer warp: fills one [ATOMS][128][64] tile of K or V for keys [n0, n0 + 128). Full 64-row chunks go by
// TMA; a partial or empty chunk is copied by the warp's lanes (rows past kv_len zero-filled) in the TMA's
// 128-byte swizzle, then made visible to the async proxy before the barrier arrive.
template <int D>
__device__ __forceinline__ void produce_tile(bf16* s_tile, uint64_t* full, const CUtensorMap* map, const bf16* pool,
                                             const PrefillParams& p, const int32_t* bt_row, int hk, int n0,
                                             int kv_len, int lane) {
  constexpr int ATOMS = D / 64;
  uint32_t bytes = 0;
#pragma unroll
  for (int c = 0; c < HOP_BN / 64; ++c) {
    const int pos0 = n0 + c * 64, n_valid = min(64, kv_len - pos0);
    if (n_valid == 64) {
      bytes += 64 * 128 * ATOMS;
      continue;
    }
#pragma unroll 1
    for (int i = lane; i < 64 * D / 8; i += 32) {  // 16-byte vectors: row r, vector v of the row
      const int r = i / (D / 8), v = i % (D / 8);
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < n_valid)
        val = *reinterpret_cast<const uint4*>(pool + paged_row(bt_row, p.block_size, p.n_kv_head, D, pos0 + r, hk) +
                                              v * 8);
      const int atom = v / 8, chunk = (v % 8) ^ (r & 7);
      *reinterpret_cast<uint4*>(reinterpret_cast<char*>(s_tile) + atom * HOP_BN * 128 + (c * 64 + r) * 128 +
                                chunk * 16) = val;
    }
  }
  fence_proxy_async();  // plain stores above -> visible to wgmma (async proxy) after the barrier
  __syncwarp();
  if (lane == 0) {
    mbar_arrive_expect_tx(full, bytes);
#pragma unroll
    for (int c = 0; c < HOP_BN / 64; ++c) {
      const int pos0 = n0 + c * 64;
      if (kv_len - pos0 < 64) continue;
      const int row = bt_row[pos0 / p.block_size] * p.block_size + pos0 % p.block_size;
#pragma unroll
      for (int a = 0; a < ATOMS; ++a)
        tma_load_3d(reinterpret_cast<char*>(s_tile) + a * HOP_BN * 128 + c * 64 * 128, map, full, a * 64, hk, row);
    }
  }
}

// Work order (n_m_blocks x units work tiles, linear index lin, unit = (sequence, head), head fastest). Both orders start with
// the heaviest row block (causal: the last, with the most key tiles). lpt_units == 0: unit by unit. Otherwise
// longest-processing-time first within sections of lpt_units units (whose K/V fit in L2): every unit's
// heaviest block, then every unit's next, ..., so that the light blocks fill the tail of the grid.
__device__ __forceinline__ void cta_tile(const PrefillParams& p, int n_m, int lin, int& m_block, int& h, int& b) {
  const int units = p.n_head * p.batch;
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

// Linear work index of round k of this CTA (persistent: grid of G <= SM count; taken by the producer warp and
// handed to the consumers through shared memory). sched 0: tile k * G + blockIdx.x, the CTA order reversed on
// odd rounds (with tiles sorted longest first, no CTA takes the heaviest tile of every round); 1: k * G +
// blockIdx.x; 2: the next tile of a global counter (lane 0 fetches, the warp gets it by shuffle; after its last
// fetch each CTA counts itself out and the last one resets the counters for the next launch).
__device__ __forceinline__ int work_index(const PrefillParams& p, int k, int n_work, int lane) {
  const int G = gridDim.x, bid = blockIdx.x;
  if (p.sched != 2) return k * G + ((p.sched == 0 && (k & 1)) ? G - 1 - bid : bid);
  int lin = 0;
  if (lane == 0) {
    lin = atomicAdd(&p.sched_counter[0], 1);
    if (lin >= n_work) {
      __threadfence();  // this CTA's last fetch is performed before it counts itself out
      if (atomicAdd(&p.sched_counter[1], 1) == G - 1) {
        p.sched_counter[0] = 0;
        p.sched_counter[1] = 0;
      }
    }
  }
  return __shfl_sync(0xffffffffu, lin, 0);
}

// One work tile: BM query rows [m0, m0 + BM) of head h of sequence b and the key tiles they see.
struct WorkTile {
  int m0, h, b, q0, q_len, kv_len, hk, diag, n_tiles;
  const int32_t* bt_row;
  bool empty;  // no query rows (m0 >= q_len): skipped by every role alike
};

template <int BM>
__device__ __forceinline__ WorkTile work_tile(const PrefillParams& p, int n_m, int lin) {
  WorkTile w;
  int m_block;
  cta_tile(p, n_m, lin, m_block, w.h, w.b);
  w.q0 = p.cu_seqlens_q[w.b];
  w.q_len = p.cu_seqlens_q[w.b + 1] - w.q0;
  w.m0 = m_block * BM;
  w.empty = w.m0 >= w.q_len;
  w.kv_len = min(p.seq_lens_k[w.b], p.kv_capacity);
  w.hk = w.h / p.group;
  w.diag = w.kv_len - w.q_len;
  int n_end = w.kv_len;
  if (p.causal) n_end = max(0, min(w.kv_len, min(w.q_len, w.m0 + BM) + w.diag));
  // Every consumer warpgroup runs all n_tiles (rows of a warpgroup past the causal limit are masked), so that
  // the ping-pong turns stay paired.
  w.n_tiles = (n_end + HOP_BN - 1) / HOP_BN;
  w.bt_row = p.block_table + int64_t(w.b) * p.max_blocks_per_seq;
  return w;
}

}  // namespace mk::cuda::attn
