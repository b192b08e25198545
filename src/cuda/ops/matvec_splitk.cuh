// The split-K decode matvec kernel (design: matvec.cu's header comment); matvec.cu chooses its shape and launches it.
#pragma once
#include <cooperative_groups.h>

#include <type_traits>

#include "cuda/ops/matvec_internal.h"

namespace mk::cuda::splitk {

constexpr int KS = 8;            // chunks per lane per row per item
constexpr int SLICE = KS * 32;   // chunks per slice = 2048 columns
constexpr int MAX_THREADS = 256;  // S * P <= 8 warps; wider rows (S > 8) use the rowpair kernel
constexpr int MAX_HEAD_CLUSTER = 8;     // ROPE_QKV_NORM: blocks per cluster (one head); the portable limit
constexpr int MAX_PAIRS_PER_BLOCK = 32;  // ROPE_QKV_NORM: G * P, a head's pairs one block keeps (one warp's lanes)

struct Params {
  MatvecArgs a;
  int S, P, n_pairs, n_groups;
  int ring;  // 1: prefetch the next group's weights while consuming the current one
  int C = 1, G = 1;  // ROPE_QKV_NORM: blocks per cluster (= per head), groups per block (C * G * P = head_dim / 2)
};

// Loads per lane per row per item of the build fitted to MINB blocks per SM (16 x 16-byte buffers do not fit 80
// registers without spilling; 8 do).
constexpr int mv_ks(int minb) { return minb >= 3 ? KS / 2 : KS; }

// MINB: minimum resident blocks per SM the register budget is fitted to (1: unconstrained, 112-136 registers;
// 3: <= 80 registers, so 2 resident blocks leave room for a block of the next PDL kernel).
// TWO_WAITS: the group loop's form (matvec.cu two_waits() chooses). false: one wait per group -- no branch around the
// sums, so every path to the second half's sums passes the first half's wait; the unconstrained build is then held
// to 2 blocks per SM (128 registers), which it keeps without spilling. true: the form before session 15 -- each half's
// sums behind `if (valid)` and each chunk's behind `if (c < n_chunks)`, so ptxas waits again before the second half,
// for the next group's first half just issued on the same scoreboard: each lane drains twice per group.
template <MatvecOut MODE, bool NORM, bool ARGMAX, class XT, int MINB, bool TWO_WAITS>
__global__ void __launch_bounds__(MAX_THREADS, MINB < 2 && !TWO_WAITS ? 2 : MINB) matvec_splitk_kernel(Params p) {
  extern __shared__ float s_x[];  // [n_cols] x (* norm weight)
  __shared__ float s_red[32];
  __shared__ float s_part[32][2];  // per warp partial dot products of its pair
  __shared__ unsigned long long s_best[32];
  const MatvecArgs& a = p.a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int S = p.S, pi = warp / S, si = warp % S;
  const int n_chunks = a.n_cols >> 3;
  constexpr int KS = mv_ks(MINB), SLICE = KS * 32;  // shadow the file-wide values
  const bool ring = p.ring;
  // ROPE_QKV_NORM: cluster `head` (blocks head * C .. head * C + C - 1) owns the head's C * G groups.
  constexpr bool HEADS = MODE == MatvecOut::ROPE_QKV_NORM;
  __shared__ float s_y[HEADS ? MAX_PAIRS_PER_BLOCK : 1][2];  // ROPE_QKV_NORM: this block's pairs of its q/k head
  __shared__ float s_head_ss;                                  // ROPE_QKV_NORM: their sum of squares

  // MatvecArgs::trace. (Storing each stamp when taken, through a pointer kept from here, measured +1.4% per 1B decode
  // step with tracing off: RESULTS.md, final round of session 11.)
  const unsigned long long t_start = a.trace ? globaltimer_ns() : 0;
  uint4 wb[2][KS] = {};  // zeros: a warp whose first pair is past the matrix sums them (one-wait loop)
  // Loads chunks [U0, U1) of this lane's slice of row pair `pair` into wb[.][U0..U1) when `on`, else zeros them.
  auto load_part = [&](int pair, bool on, auto u0, auto u1) {
    const bf16* r0 = a.w + size_t(2 * pair) * size_t(a.n_cols);
    const bf16* r1 = 2 * pair + 1 < a.n_rows ? r0 + a.n_cols : r0;  // odd last row: re-read row 0 (harmless)
#pragma unroll
    for (int u = decltype(u0)::value; u < decltype(u1)::value; ++u) {
      const int c = si * SLICE + u * 32 + lane;
      if (on && c < n_chunks) {
        wb[0][u] = ld_stream(r0 + size_t(c) * 8);
        wb[1][u] = ld_stream(r1 + size_t(c) * 8);
      } else {
        wb[0][u] = wb[1][u] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  using H0 = std::integral_constant<int, 0>;
  using H1 = std::integral_constant<int, KS / 2>;
  using H2 = std::integral_constant<int, KS>;
  auto load = [&](int pair, bool on) { load_part(pair, on, H0{}, H2{}); };

  // Before the wait: nothing here depends on the previous kernel (weights and the norm weight).
  // Groups this block works on: grp, grp + grp_step(), ... below grp_end() (the other modes: a grid-stride loop).
  int grp = blockIdx.x;
  if constexpr (HEADS) grp = blockIdx.x / p.C * p.C * p.G + blockIdx.x % p.C;
  const int grp0 = grp;
  auto grp_step = [&] {
    if constexpr (HEADS) return unsigned(p.C);
    else return gridDim.x;
  };
  auto grp_end = [&] {
    if constexpr (HEADS) return (int(blockIdx.x) / p.C + 1) * p.C * p.G;
    else return p.n_groups;
  };
  // Behind a branch, as the refills: predicated (zeros for a block without a first pair), these pre-wait loads cost
  // the decode step up to 5% (Qwen3-0.6B; bench/RESULTS.md, session 15 call 8 against session 16 call 1).
  bool loaded = false;
  if (grp < grp_end() && grp * p.P + pi < p.n_pairs) {
    load(grp * p.P + pi, true);
    loaded = true;
  }
  if (a.trigger_at_start) pdl_launch_dependents();  // see MatvecArgs::trigger_at_start
  if constexpr (NORM)
    for (int i = threadIdx.x * 4; i < a.n_cols; i += blockDim.x * 4)
      *reinterpret_cast<float4*>(s_x + i) = *reinterpret_cast<const float4*>(a.norm_w + i);
  // ADD with a.add_early: the first group's residual values are read now, so that the read-modify-write of `out`
  // at the end of the kernel costs no L2 round trip (the caller guarantees that the kernel before this one does not
  // write `out`, see MatvecArgs::add_early).
  float base0 = 0.f, base1 = 0.f;
  bool have_base = false;
  if constexpr (MODE == MatvecOut::ADD) {
    const int pair = grp * p.P + pi;
    if (a.add_early && si == 0 && lane == 0 && grp < p.n_groups && pair < p.n_pairs) {
      base0 = __ldcg(a.out + 2 * pair);
      if (2 * pair + 1 < a.n_rows) base1 = __ldcg(a.out + 2 * pair + 1);
      have_base = true;
    }
  }
  pdl_wait();
  const float ss = stage_x<NORM, XT>(a, s_x, threadIdx.x, blockDim.x);
  float inv = 1.f;
  if constexpr (NORM) inv = rsqrtf(block_sum(ss, s_red) / float(a.n_cols) + a.eps);
  __syncthreads();  // s_x complete
  if (!a.trigger_at_start) pdl_launch_dependents();
  const unsigned long long t_staged = a.trace ? globaltimer_ns() : 0;

  unsigned long long best = 0;
  for (; grp < grp_end(); grp += grp_step()) {
    const int pair = grp * p.P + pi;
    const bool valid = pair < p.n_pairs;
    if (!ring && !loaded) load(pair, valid);  // ring: loaded by the previous iteration (or before the wait)
    loaded = false;
    const int next_pair = (grp + grp_step()) * p.P + pi;
    const bool more = grp + grp_step() < grp_end();
    const bool has_next = more && next_pair < p.n_pairs;
    const bool prefetch = ring && more;  // zeros when !has_next: the next group's sums must not see stale weights
    float acc0 = 0.f, acc1 = 0.f;
    auto consume = [&](auto u0, auto u1) {
#pragma unroll
      for (int u = decltype(u0)::value; u < decltype(u1)::value; ++u) {
        const int c = si * SLICE + u * 32 + lane;
        const bool in = c < n_chunks;
        if constexpr (TWO_WAITS) {
          if (in) dot8_pair(s_x + c * 8, wb[0][u], wb[1][u], acc0, acc1);
        } else {  // a chunk past the row's end (zero weights) reads x's first chunk and its sums are dropped
          float d0 = 0.f, d1 = 0.f;
          dot8_pair(s_x + (in ? c : 0) * 8, wb[0][u], wb[1][u], d0, d1);
          acc0 += in ? d0 : 0.f;
          acc1 += in ? d1 : 0.f;
        }
      }
    };
    // The refill of a half reuses the registers just consumed. ptxas gives all of a lane's weight loads one
    // scoreboard, so a lane still drains once per group (twice with TWO_WAITS); a cp.async ring that avoids that
    // streamed the 32 MiB shapes and the decode step slower: RESULTS.md, session 7. x kept in registers instead of read
    // from s_x per chunk, with the partial sums summed four groups per barrier pair, was slower too, and x loaded by
    // every lane from global memory far slower: RESULTS.md, session 11. The refills stay behind a uniform branch:
    // predicated, ptxas hoists them into the sums and doubles the registers (session 15: 120 -> 230).
    if constexpr (TWO_WAITS) {
      if (valid) consume(H0{}, H1{});
      if (ring && has_next) load_part(next_pair, true, H0{}, H1{});
      if (valid) consume(H1{}, H2{});
      if (ring && has_next) load_part(next_pair, true, H1{}, H2{});
    } else {  // an invalid pair's weights are zeros (load_part), so its sums need no branch either
      consume(H0{}, H1{});
      if (prefetch) load_part(next_pair, has_next, H0{}, H1{});
      consume(H1{}, H2{});
      if (prefetch) load_part(next_pair, has_next, H1{}, H2{});
    }
    // ADD: the next group's residual rows are read one group ahead (after the wait: the kernel before may write
    // them; no other block writes them, and this group's store below writes other rows), so that its store does
    // not wait on an L2 round trip that the block's other warps would then wait for at the next barrier.
    float next0 = 0.f, next1 = 0.f;
    if constexpr (MODE == MatvecOut::ADD) {
      if (has_next && si == 0 && lane == 0) {
        next0 = __ldcg(a.out + 2 * next_pair);
        if (2 * next_pair + 1 < a.n_rows) next1 = __ldcg(a.out + 2 * next_pair + 1);
      }
    }
    acc0 = warp_sum(acc0);
    acc1 = warp_sum(acc1);
    if (S > 1) {  // uniform over the block
      if (lane == 0) {
        s_part[warp][0] = acc0;
        s_part[warp][1] = acc1;
      }
      __syncthreads();
      if (si == 0 && lane == 0) {
        acc0 = acc1 = 0.f;
        for (int k = 0; k < S; ++k) {
          acc0 += s_part[pi * S + k][0];
          acc1 += s_part[pi * S + k][1];
        }
      }
      __syncthreads();  // s_part is rewritten by the next group
    }
    if (valid && si == 0 && lane == 0) {
      const int r = 2 * pair;
      if constexpr (HEADS) {
        if (r / a.rope.head_dim < a.rope.n_head + a.rope.n_kv_head) {  // q or k head: kept for the norm below
          float* y = s_y[(grp - grp0) / p.C * p.P + pi];
          y[0] = acc0 * inv + (a.bias ? a.bias[r] : 0.f);
          y[1] = acc1 * inv + (a.bias ? a.bias[r + 1] : 0.f);
        } else {
          store_row_pair<MODE, ARGMAX>(a, r, true, acc0 * inv, acc1 * inv, best);
        }
      } else {
        store_row_pair<MODE, ARGMAX>(a, r, r + 1 < a.n_rows, acc0 * inv, acc1 * inv, best, have_base, base0,
                                     base1);
      }
    }
    have_base = MODE == MatvecOut::ADD && has_next;
    base0 = next0, base1 = next1;
  }
  if constexpr (HEADS) {
    const MatvecRope& rp = a.rope;
    const int head = blockIdx.x / p.C;
    if (head < rp.n_head + rp.n_kv_head) {  // uniform over the cluster (the v heads take no norm)
      namespace cg = cooperative_groups;
      const cg::cluster_group cluster = cg::this_cluster();
      const int n_mine = p.G * p.P;
      __syncthreads();  // s_y complete
      float y0 = 0.f, y1 = 0.f;
      if (warp == 0) {
        if (lane < n_mine) y0 = s_y[lane][0], y1 = s_y[lane][1];
        const float ss = warp_sum(y0 * y0 + y1 * y1);
        if (lane == 0) s_head_ss = ss;
      }
      // barrier.cluster arrive (release) + wait (acquire): every block's partial sum of squares is visible.
      cluster.sync();
      float total = 0.f;
      if (warp == 0)
        for (int k = 0; k < p.C; ++k) total += *cluster.map_shared_rank(&s_head_ss, k);  // rank order: same bits
      // Arrive now, wait before exiting: no block may exit (freeing s_head_ss) while another still reads it.
      cluster.barrier_arrive();
      if (warp == 0 && lane < n_mine) {
        const float inv_rms = rsqrtf(total / float(rp.head_dim) + rp.eps);
        const int pair = (grp0 + lane / p.P * p.C) * p.P + lane % p.P;
        norm_rope_store(rp, head < rp.n_head ? rp.q_norm : rp.k_norm, 2 * pair, inv_rms, y0, y1);
      }
      cluster.barrier_wait();
    }
  }
  if constexpr (ARGMAX) argmax_commit(a.argmax, s_best, best, n_warps, [] { __syncthreads(); });
  if (a.trace && threadIdx.x == 0) {
    unsigned long long* t = a.trace + 4 * size_t(blockIdx.x);
    t[0] = sm_id(), t[1] = t_start, t[2] = t_staged, t[3] = globaltimer_ns();
  }
}

}  // namespace mk::cuda::splitk
