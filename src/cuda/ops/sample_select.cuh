// The top-k / top-p selection of the on-device draw (sample.cuh): which candidates the host Sampler's filter_top_k
// and filter_top_p (runtime/sampler.cpp) keep, found without sorting.
//   Candidates x = (l - m) / T <= 0 are ranked by (x descending, id ascending); rank_key(x) is a 32-bit key that
//   ascends as x descends. top-k keeps keys <= the k-th smallest key (ties kept); top-p, over what top-k kept, keeps
//   the ranked prefix while the mass ranked before a candidate is < p * total. Both kept sets are "keys below a bound
//   key, plus candidates at the bound key up to an id": KeepBound.
//   Each bound is found by a radix descent over the keys, 8 bits a level: a histogram of the digit (count, and for
//   top-p the mass exp(x)) over the candidates whose higher digits equal the prefix found so far, merged over the
//   grid, then the digit where the running count / mass first reaches k / p * total. Four levels give the exact key;
//   among the candidates tied at top-p's key, the number kept follows from their equal weights, and the id of the last
//   one from a walk in id order.
//   Masses are summed in 104-bit fixed point (two 64-bit integer words): integer sums are exact and independent of
//   the order in which blocks and threads add them, so every block reads the same histogram and every level's bins
//   add up exactly to the bin above them. They differ from the host's double sums by rounding only.
// Included by sample.cuh after its block reductions (block_scan, block_min_max_i).
// Grid: the blocks meet at a barrier per level (all of them must be resident at once: at most one block per SM of
// 1024 threads); one block: no global memory. Test: tests/gpu/test_ops_sample.cu.
#pragma once
#include <climits>
#include <cstdint>

#include "cuda/common/device.cuh"
#include "cuda/ops/sample.h"

namespace mk::cuda::sample_detail {

using u64 = unsigned long long;

// The candidate of logit l as the host computes it, in float; a zero made +0 (equal values, equal keys).
__device__ __forceinline__ float candidate(float l, float m, float T) {
  const float x = __fdiv_rn(__fsub_rn(l, m), T);
  return x == 0.f ? 0.f : x;
}

// Ascends as x descends (the float order-preserving key, complemented).
__device__ __forceinline__ uint32_t rank_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return ~(b ^ ((b & 0x80000000u) ? 0xffffffffu : 0x80000000u));
}

__device__ __forceinline__ float key_value(uint32_t k) {
  const uint32_t a = ~k;
  return __uint_as_float((a & 0x80000000u) ? (a ^ 0x80000000u) : ~a);
}

// A weight w in [0, 1] as w * 2^44 = hi + lo * 2^-40 (hi <= 2^44, lo < 2^40: sums over 2^20 candidates fit in 64 bits).
__device__ __forceinline__ void fixed_mass(double w, u64& hi, u64& lo) {
  const double v = ldexp(w, 44);
  const double h = floor(v);
  hi = u64(h);
  lo = u64(ldexp(v - h, 40));
}

__device__ __forceinline__ double mass_value(u64 hi, u64 lo) { return ldexp(double(hi), -44) + ldexp(double(lo), -84); }

// Candidates with (rank_key, id) <= (key, id) lexicographically are kept; the default keeps all.
struct KeepBound {
  uint32_t key = 0xffffffffu;
  int id = INT_MAX;
  __device__ bool keeps(uint32_t k, int i) const { return k < key || (k == key && i <= id); }
};

struct Bin {
  u64 c, h, l;  // count, mass high and low words (no initialisers: SelectSmem lives in shared memory)
};

// The selection's shared memory. The block histogram's 64-bit sums are pairs of 32-bit words (low, high) added with
// native 32-bit shared atomics (smem_add64): 64-bit shared atomics are compare-and-swap loops, which crowded bins
// made cost tens of microseconds per draw (H200, this file's first version).
struct SelectSmem {
  unsigned cnt[SAMPLE_SELECT_BINS], hi[SAMPLE_SELECT_BINS][2], lo[SAMPLE_SELECT_BINS][2];  // this block's histogram
  u64 warp[32][3];                                                             // scan partials
  Bin sel_excl, sel_bin;                                                       // the chosen bin (broadcast)
  double tie_before;                                                           // ties before block bt (tie_id)
};

// Where this block reads and what it shares with the others.
struct SelectCtx {
  const float* logits;
  int n_vocab;
  float m, T;
  int lo, hi, chunk;  // this block's ids [lo, hi); every block's range is chunk ids long (the last one shorter)
  int G;              // blocks taking part; 1: no global memory is touched
  GridSampleScratch sc;
  int n_levels = 0;   // histograms of sc.hist used so far
};

// Every block waits for every other. Ticket order: the counter only grows within a draw (the draw's last block
// resets it). Without fences (device.cuh, atom_add_acq_rel_gpu): the barrier orders the block's histogram atomics
// before thread 0's release; its acquire reads every arrival's, and the second barrier orders the block's reads after.
__device__ inline void grid_barrier(unsigned* bar, int G) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atom_add_acq_rel_gpu(bar, 1u);
    const unsigned goal = (ticket / unsigned(G) + 1u) * unsigned(G);
    while (ld_acquire_gpu(bar) < goal) {
    }
  }
  __syncthreads();
}

// w[0] + w[1] * 2^32 += v, exactly: the carry out of the low word goes to the high word (both sums are exact modulo
// 2^32 whatever the order, and the true sum fits in 64 bits).
__device__ __forceinline__ void smem_add64(unsigned* w, u64 v) {
  const unsigned lo = unsigned(v), old = atomicAdd(w, lo);
  atomicAdd(w + 1, unsigned(v >> 32) + (old + lo < old ? 1u : 0u));
}

__device__ __forceinline__ u64 smem_word64(const unsigned* w) { return u64(w[0]) | (u64(w[1]) << 32); }

// Adds one digit per lane (< 0: none) to the block histogram. A lane alone with its digit in the warp adds it
// itself; lanes sharing one add their group's sum once (the digits of a level's first level crowd into a few bins).
// Every lane of the warp calls it.
__device__ inline void warp_hist_add(int digit, double w, bool by_mass, SelectSmem& s) {
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  u64 h = 0, l = 0;
  if (digit >= 0 && by_mass) fixed_mass(w, h, l);
  const unsigned peers = __match_any_sync(FULL, digit);
  const bool alone = __popc(peers) == 1;
  if (digit >= 0 && alone) {
    atomicAdd(&s.cnt[digit], 1u);
    if (by_mass) smem_add64(s.hi[digit], h), smem_add64(s.lo[digit], l);
  }
  unsigned todo = __ballot_sync(FULL, digit >= 0 && !alone);
  while (todo) {
    const int d = __shfl_sync(FULL, digit, __ffs(todo) - 1);
    const unsigned group = __ballot_sync(FULL, digit == d);
    todo &= ~group;
    if (by_mass) {
      u64 gh = digit == d ? h : 0, gl = digit == d ? l : 0;
      for (int o = 16; o > 0; o >>= 1) gh += __shfl_xor_sync(FULL, gh, o), gl += __shfl_xor_sync(FULL, gl, o);
      if (lane == 0) smem_add64(s.hi[d], gh), smem_add64(s.lo[d], gl);
    }
    if (lane == 0) atomicAdd(&s.cnt[d], unsigned(__popc(group)));
  }
}

// The grid's histogram of one level: the digit at `shift` of the keys <= lim whose digits above it equal `prefix`.
// Thread t < 256 gets bin t; the others an empty bin.
__device__ inline Bin level_hist(SelectCtx& c, int shift, uint32_t prefix, uint32_t lim, bool by_mass, SelectSmem& s) {
  const int tid = threadIdx.x, nt = blockDim.x;
  if (tid < SAMPLE_SELECT_BINS) s.cnt[tid] = s.hi[tid][0] = s.hi[tid][1] = s.lo[tid][0] = s.lo[tid][1] = 0;
  __syncthreads();
  const int rounds = (c.hi - c.lo + nt - 1) / nt;
  for (int r = 0; r < rounds; ++r) {  // the same count in every warp: the aggregation needs whole warps
    const int i = c.lo + r * nt + tid;  // coalesced: the histogram does not depend on who adds what
    int digit = -1;
    double w = 0;
    if (i < c.hi) {
      const float x = candidate(__ldg(c.logits + i), c.m, c.T);
      const uint32_t k = rank_key(x);
      if (isfinite(x) && k <= lim && (shift == 24 || (k >> (shift + 8)) == prefix)) {
        digit = int((k >> shift) & 255u);
        if (by_mass) w = exp(double(x));
      }
    }
    warp_hist_add(digit, w, by_mass, s);
  }
  __syncthreads();
  Bin b{};
  if (c.G > 1) {
    u64* g = c.sc.hist + size_t(c.n_levels++) * 3 * SAMPLE_SELECT_BINS;  // [3][256], zero until now
    if (tid < SAMPLE_SELECT_BINS && s.cnt[tid]) {
      atomicAdd(g + tid, u64(s.cnt[tid]));
      if (by_mass)
        atomicAdd(g + SAMPLE_SELECT_BINS + tid, smem_word64(s.hi[tid])),
            atomicAdd(g + 2 * SAMPLE_SELECT_BINS + tid, smem_word64(s.lo[tid]));
    }
    grid_barrier(c.sc.barrier, c.G);
    if (tid < SAMPLE_SELECT_BINS)
      b = {__ldcg(g + tid), __ldcg(g + SAMPLE_SELECT_BINS + tid), __ldcg(g + 2 * SAMPLE_SELECT_BINS + tid)};
  } else if (tid < SAMPLE_SELECT_BINS) {
    b = {s.cnt[tid], smem_word64(s.hi[tid]), smem_word64(s.lo[tid])};
  }
  return b;
}

// Exclusive scan of the bins in thread order; total: all of them. Every thread calls it.
__device__ inline Bin scan_bins(const Bin& v, Bin& total, SelectSmem& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  Bin in = v;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 c = __shfl_up_sync(0xffffffffu, in.c, o), h = __shfl_up_sync(0xffffffffu, in.h, o),
              l = __shfl_up_sync(0xffffffffu, in.l, o);
    if (lane >= o) in.c += c, in.h += h, in.l += l;
  }
  __syncthreads();  // s.warp may still be read by the previous scan
  if (lane == 31) s.warp[warp][0] = in.c, s.warp[warp][1] = in.h, s.warp[warp][2] = in.l;
  __syncthreads();
  Bin before{};
  total = Bin{};
  for (int w = 0; w < nw; ++w) {
    if (w < warp) before.c += s.warp[w][0], before.h += s.warp[w][1], before.l += s.warp[w][2];
    total.c += s.warp[w][0], total.h += s.warp[w][1], total.l += s.warp[w][2];
  }
  return {before.c + in.c - v.c, before.h + in.h - v.h, before.l + in.l - v.l};
}

__device__ inline Bin add(const Bin& a, const Bin& b) { return {a.c + b.c, a.h + b.h, a.l + b.l}; }

// One level's choice: the first bin where the running count reaches `need` (by_mass: the running mass, as a double,
// reaches `target`), counting from `before`. Its exclusive sum and its own bin go to s.sel_excl / s.sel_bin.
__device__ inline int choose_bin(const Bin& v, const Bin& excl, const Bin& before, bool by_mass, u64 need,
                                 double target, SelectSmem& s, int* s_i) {
  const int tid = threadIdx.x;
  bool cross = false;
  if (tid < SAMPLE_SELECT_BINS && v.c > 0) {
    const Bin a = add(before, excl), z = add(a, v);
    cross = by_mass ? mass_value(a.h, a.l) < target && mass_value(z.h, z.l) >= target : a.c < need && z.c >= need;
  }
  int d = block_min_max_i(cross ? tid : SAMPLE_SELECT_BINS, false, s_i);
  if (d == SAMPLE_SELECT_BINS)  // not reached (rounding): the last non-empty bin
    d = block_min_max_i(tid < SAMPLE_SELECT_BINS && v.c > 0 ? tid : 0, true, s_i);
  if (tid == d) s.sel_excl = excl, s.sel_bin = v;
  __syncthreads();
  return d;
}

// The key where the running count (top-k: need = k) or mass (top-p: p * the total of the keys <= lim) over the keys
// <= lim in ascending order first reaches its goal. before: the keys below it; at: its own candidates. Returns
// 0xffffffff (keep all) for top-k when k >= the number of candidates.
__device__ inline uint32_t descend(SelectCtx& c, uint32_t lim, bool by_mass, u64 need, float p, Bin& before, Bin& at,
                                   double& target, SelectSmem& s, int* s_i) {
  uint32_t prefix = 0;
  before = Bin{};
  for (int shift = 24; shift >= 0; shift -= 8) {
    const Bin v = level_hist(c, shift, prefix, lim, by_mass, s);
    Bin total{};
    const Bin excl = scan_bins(v, total, s);
    if (shift == 24) {
      if (!by_mass && need >= total.c) return 0xffffffffu;  // host: k >= the number of candidates keeps all
      target = by_mass ? double(p) * mass_value(total.h, total.l) : 0.0;
    }
    const int d = choose_bin(v, excl, before, by_mass, need, target, s, s_i);
    before = add(before, s.sel_excl);
    at = s.sel_bin;
    prefix = (prefix << 8) | uint32_t(d);
  }
  return prefix;
}

// The id of the n-th (1-based) candidate with key t in ascending id order; every block gets it.
__device__ inline int tie_id(SelectCtx& c, uint32_t t, u64 n, SelectSmem& s, double* s_d, int* s_i, int* s_pick) {
  const int tid = threadIdx.x, nt = blockDim.x;
  auto is_tie = [&](int i) {
    const float x = candidate(__ldg(c.logits + i), c.m, c.T);
    return isfinite(x) && rank_key(x) == t;
  };
  // Block bt holding it and its rank r there: from the per-block counts (G > 1: shared through sc.ties).
  int bt = 0;
  double r = double(n);
  if (c.G > 1) {
    double mine = 0;
    for (int i = c.lo + tid; i < c.hi; i += nt) mine += is_tie(i);
    double total;
    block_scan(mine, s_d, total);
    if (tid == 0) c.sc.ties[blockIdx.x] = int(total);
    grid_barrier(c.sc.barrier, c.G);
    const double cnt = tid < c.G ? double(__ldcg(c.sc.ties + tid)) : 0.0;
    const double pre = block_scan(cnt, s_d, total);
    bt = block_min_max_i(tid < c.G && pre < r && pre + cnt >= r ? tid : nt, false, s_i);
    if (bt == nt) bt = c.G - 1;  // not reached: cannot happen (n <= the ties)
    if (tid == bt) s.tie_before = pre;
    __syncthreads();
    r -= s.tie_before;
  }
  // The walk of block bt's ids in order: per-thread contiguous ranges, a scan of their counts, the owner walks.
  const int lo = min(c.n_vocab, bt * c.chunk), len = min(c.n_vocab, lo + c.chunk) - lo, per = (len + nt - 1) / nt;
  const int i0 = lo + min(len, tid * per), i1 = lo + min(len, tid * per + per);
  double mine = 0, total;
  for (int i = i0; i < i1; ++i) mine += is_tie(i);
  const double pre = block_scan(mine, s_d, total);
  if (tid == 0) *s_pick = INT_MAX;  // not reached: cannot happen (keeps every tie)
  __syncthreads();
  if (pre < r && pre + mine >= r) {
    double k = pre;
    for (int i = i0; i < i1; ++i)
      if (is_tie(i) && ++k >= r) {
        *s_pick = i;
        break;
      }
  }
  __syncthreads();
  return *s_pick;
}

// The bound of what top-k (top_k > 0) then top-p (top_p < 1) keep. Every thread of every block calls it with the
// same arguments and gets the same bound.
__device__ inline KeepBound select_keep(SelectCtx& c, int top_k, float top_p, SelectSmem& s, double* s_d, int* s_i,
                                        int* s_pick) {
  KeepBound kb;
  Bin before{}, at{};
  double target = 0;
  if (top_k > 0 && top_k < c.n_vocab) kb.key = descend(c, 0xffffffffu, false, u64(top_k), 0.f, before, at, target, s, s_i);
  if (top_p < 1.f) {
    const uint32_t t = descend(c, kb.key, true, 0, top_p, before, at, target, s, s_i);
    kb.key = t;
    // The candidates tied at t weigh w each; the i-th (0-based, id order) stays while m_gt + i w < target.
    const double w = exp(double(key_value(t))), m_gt = mass_value(before.h, before.l);
    const double q = (target - m_gt) / w;
    const u64 n_keep = q >= double(at.c) ? at.c : u64(fmax(1.0, ceil(q)));
    if (n_keep < at.c) kb.id = tie_id(c, t, n_keep, s, s_d, s_i, s_pick);
  }
  return kb;
}

}  // namespace mk::cuda::sample_detail
