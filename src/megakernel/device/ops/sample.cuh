// The sampled Argmax (isa.h SampleParams): the step's next token drawn on one SM by the host Sampler's rule
// (runtime/sampler.h; the layered path's cuda/ops/sample.cuh block_sample, here on the NCT consumer threads with
// named barriers, since the loader warp never joins a __syncthreads):
//   candidates x_i = (l_i - max finite l) / T in float (non-finite ones dropped), min-p keeps x_i >= log(min_p),
//   weights exp(x_i) in double walked in ascending id order; the first id whose running sum exceeds u * total,
//   u = philox_uniform(seed, first_draw + step); the last kept id if none does.
// The max comes from the LM-head slices' amax records (when finite it is the max finite logit: no NaN or +inf
// anywhere); otherwise one extra pass over the logits finds it.
// Layout of the walk: the vocabulary in tiles of 128 ids (lane l of a warp holds ids 4l..4l+3 of a tile: coalesced
// 16-byte loads), tiles in blocks of `bt`, blocks split evenly over the consumer warps in id order. Pass 1: each
// warp sums its blocks' weights tile by tile (per lane sequentially, a warp scan over lanes, tile totals added in
// order) and records its running sum at the start of each block in s_x. Then every thread adds the warp totals in
// warp order, finds the warp whose range takes the sum past the target, and that warp finds the block (from the
// records) and walks only that block again with the very same arithmetic. Sums differ from the host's one
// sequential sum by rounding only, so a different id needs u * total within ~1e-15 of a boundary; where the walk
// and the records disagree by a rounding step, the last kept id of the range that holds the target is taken.
// Flag protocol: the logits are flagged pairs in a sampled launch (isa.h) and pass 1 polls every pair it reads; the
// walk re-reads pairs the same thread saw fresh (read-read coherence, as poll_region).
// Mirrors: sample_draw (src/megakernel/sim_sample.cpp). Test: tests/gpu/test_megakernel_sample.cu.
#pragma once
#include "core/philox.h"
#include "cuda/common/device.cuh"
#include "megakernel/device/poll.cuh"

namespace mk::megakernel::device {

constexpr int SAMPLE_TILE = 128;   // ids per warp tile (4 per lane)
constexpr int SAMPLE_BATCH = 4;    // tiles loaded before their sums are taken (loads in flight per lane)

// Tiles per block of the walk: at least 8, more when the blocks' running sums (one double each, in s_x of
// x_floats floats) would not fit; a multiple of SAMPLE_BATCH.
__host__ __device__ inline int sample_block_tiles(int n_vocab, int x_floats) {
  const int tiles = (n_vocab + SAMPLE_TILE - 1) / SAMPLE_TILE, cap = x_floats / 2;
  int bt = (tiles + cap - 1) / cap;
  bt = bt < 8 ? 8 : bt;
  return (bt + SAMPLE_BATCH - 1) / SAMPLE_BATCH * SAMPLE_BATCH;
}

namespace sample_detail {

constexpr unsigned FULL = 0xffffffffu;

// One logit pair polled until it holds `epoch` (the watchdog as poll1).
__device__ __forceinline__ float poll_pair(const MkParams& p, const u64* a, uint32_t epoch, uint32_t instr) {
  u64 v = ld_flag(a);
  const long long t0 = clock64();
  for (uint32_t k = 0; !fresh(v, epoch); ++k) {
    if ((k & 63u) == 1u && flag_poll_expired(p, instr, t0)) break;
    v = ld_flag(a);
  }
  return flag_val(v);
}

// Logits of this lane's 4 ids in SAMPLE_BATCH consecutive tiles from id i0 (i0 % 4 == 0); ids >= n read as NaN
// (weight 0, never kept). The loads of all tiles go out before any value is used. FLAG: stale pairs are polled
// when `poll` (the first pass), else taken as read (the walk: this thread saw them fresh).
template <bool FLAG>
__device__ __forceinline__ void load_batch(const MkParams& p, int i0, int n, uint32_t epoch, uint32_t instr, bool poll,
                                           float (&v)[SAMPLE_BATCH][4]) {
  if constexpr (FLAG) {
    const u64* base = p.fws + p.L.logits;
    Pairs4 q[SAMPLE_BATCH];
#pragma unroll
    for (int k = 0; k < SAMPLE_BATCH; ++k) {
      const int i = i0 + k * SAMPLE_TILE;
      q[k] = Pairs4{};  // never used past n, but set: a value kept from the previous call would be live state (spills)
      if (i < n) q[k] = ld_pairs4(base + i);  // the padding to 4 floats is inside the workspace
    }
#pragma unroll
    for (int k = 0; k < SAMPLE_BATCH; ++k) {
      const int i = i0 + k * SAMPLE_TILE;
      const u64 e[4] = {q[k].a.x, q[k].a.y, q[k].b.x, q[k].b.y};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        v[k][j] = i + j >= n ? NAN : poll && !fresh(e[j], epoch) ? poll_pair(p, base + i + j, epoch, instr) : flag_val(e[j]);
    }
  } else {
    const float* base = p.ws + p.L.logits;
    float4 q[SAMPLE_BATCH];
#pragma unroll
    for (int k = 0; k < SAMPLE_BATCH; ++k) {
      const int i = i0 + k * SAMPLE_TILE;
      q[k] = make_float4(0.f, 0.f, 0.f, 0.f);  // as above
      if (i < n) q[k] = ld_act4(base + i);
    }
#pragma unroll
    for (int k = 0; k < SAMPLE_BATCH; ++k) {
      const int i = i0 + k * SAMPLE_TILE;
      const float e[4] = {q[k].x, q[k].y, q[k].z, q[k].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) v[k][j] = i + j < n ? e[j] : NAN;
    }
  }
}

struct Rule {
  float m, T;  // max finite logit, temperature
  double cut;  // log(min_p), or -inf
  // Weight of one logit: 0 for a dropped candidate. kept: the candidate survives (finite, >= cut), as the host's.
  __device__ __forceinline__ double weight(float l, bool& kept) const {
    const float x = __fdiv_rn(__fsub_rn(l, m), T);
    kept = isfinite(x) && double(x) >= cut;
    return kept ? exp(double(x)) : 0.0;
  }
};

// Inclusive scan over the warp's lanes (the same tree in every pass, so the same roundings).
__device__ __forceinline__ double warp_scan(double v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double u = __shfl_up_sync(FULL, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

__device__ __forceinline__ int warp_max_i(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
  return v;
}

}  // namespace sample_detail

// The draw of one step (see the top): every consumer thread calls it, all get the id, or -1 when no logit is finite.
// hint: the max of the LM-head slices' amax values. Scratch: s_x (the blocks' running sums), s_aux, s_red.
// Not inlined: its registers stay out of the kernel's hot ops (MK_SAMPLE_INLINE: inlined, for comparison).
#ifdef MK_SAMPLE_INLINE
#define MK_SAMPLE_FN __forceinline__
#else
#define MK_SAMPLE_FN __noinline__
#endif
template <bool FLAG>
__device__ MK_SAMPLE_FN int32_t sample_token(const MkParams& p, float* s_x, float* s_aux, float* s_red, float hint,
                                             uint32_t epoch, uint32_t instr, uint64_t draw) {
  using namespace sample_detail;
  const int n = p.L.n_vocab, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m = hint;
  if (!isfinite(m)) {  // a NaN or an infinity among the logits: the max finite one, polled id by id (rare)
    m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += NCT) {
      const float l = FLAG ? poll_pair(p, p.fws + p.L.logits + i, epoch, instr) : ld_act(p.ws + p.L.logits + i);
      if (isfinite(l)) m = fmaxf(m, l);
    }
    m = mk::cuda::warp_max(m);
    csync();  // s_red may still be read by the caller's broadcast
    if (lane == 0) s_red[warp] = m;
    csync();
    for (int w = 0; w < WARPS; ++w) m = fmaxf(m, s_red[w]);
    if (m == -INFINITY) return -1;
  }
  const Rule rule{m, p.sample.temperature, p.sample.min_p > 0.f ? log(double(p.sample.min_p)) : -INFINITY};
  const int bt = sample_block_tiles(n, p.smem_x_floats), tiles = (n + SAMPLE_TILE - 1) / SAMPLE_TILE;
  const int nb = (tiles + bt - 1) / bt, bpw = (nb + WARPS - 1) / WARPS;
  double* s_run = reinterpret_cast<double*>(s_x);     // [nb] a block's warp-local running sum at its start
  double* s_tot = reinterpret_cast<double*>(s_aux);   // [WARPS] each warp's sum
  int* s_kept = reinterpret_cast<int*>(s_tot + WARPS);  // [WARPS] each warp's last kept id (-1: none)
  int* s_pick = s_kept + WARPS;                         // [1]
  // Sums one batch of tiles from id i0 on into run (warp-uniform); kept = the lane's last kept id.
  auto batch = [&](int i0, bool poll, double& run, int& kept) {
    float v[SAMPLE_BATCH][4];
    load_batch<FLAG>(p, i0, n, epoch, instr, poll, v);
#pragma unroll
    for (int k = 0; k < SAMPLE_BATCH; ++k) {
      double s = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bool keep;
        s += rule.weight(v[k][j], keep);
        if (keep) kept = i0 + k * SAMPLE_TILE + j;
      }
      run += __shfl_sync(FULL, warp_scan(s), 31);
    }
  };
  const int b0 = min(nb, warp * bpw), b1 = min(nb, b0 + bpw);
  double run = 0;
  int kept = -1;
  for (int b = b0; b < b1; ++b) {
    if (lane == 0) s_run[b] = run;
    for (int t = 0; t < bt; t += SAMPLE_BATCH) batch((b * bt + t) * SAMPLE_TILE + 4 * lane, FLAG, run, kept);
  }
  kept = warp_max_i(kept);
  csync();  // s_aux may still be read by the caller
  if (lane == 0) s_tot[warp] = run, s_kept[warp] = kept;
  csync();
  // The warp totals in warp order (the same sums in every thread); the target; the warp whose range holds it.
  double total = 0;
  int last = -1;
  for (int w = 0; w < WARPS; ++w) total += s_tot[w], last = max(last, s_kept[w]);
  const double target = philox_uniform(p.sample.seed, draw) * total;
  double prefix = 0;
  int owner = -1;
  for (int w = 0; w < WARPS && owner < 0; ++w) {
    if (prefix + s_tot[w] > target) owner = w;
    else prefix += s_tot[w];
  }
  if (owner < 0) return last;  // u * total rounded up to total: the last kept id, as the host
  if (warp == owner) {
    const double t = target - prefix;  // in the warp's own running sums
    const int ob0 = min(nb, owner * bpw), ob1 = min(nb, ob0 + bpw);
    int blk = -1;  // the first block whose end passes t
    for (int base = ob0; base < ob1 && blk < 0; base += 32) {
      const int b = base + lane;
      const double end = b + 1 < ob1 ? s_run[min(b + 1, nb - 1)] : s_tot[owner];
      const unsigned hit = __ballot_sync(FULL, b < ob1 && end > t);
      if (hit) blk = base + __ffs(hit) - 1;
    }
    int pick = -1;
    if (blk >= 0) {  // walk block blk from its record, batch by batch, with batch()'s arithmetic
      double r = s_run[blk];
      int blk_kept = -1;
      for (int tt = 0; tt < bt && pick < 0; tt += SAMPLE_BATCH) {
        const int i0 = (blk * bt + tt) * SAMPLE_TILE + 4 * lane;
        float v[SAMPLE_BATCH][4];
        load_batch<FLAG>(p, i0, n, epoch, instr, false, v);
#pragma unroll
        for (int k = 0; k < SAMPLE_BATCH; ++k) {
          if (pick >= 0) break;  // warp-uniform
          double s = 0, w[4];
          bool keep[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            s += w[j] = rule.weight(v[k][j], keep[j]);
            if (keep[j]) blk_kept = i0 + k * SAMPLE_TILE + j;
          }
          const double incl = warp_scan(s), before = __shfl_up_sync(FULL, incl, 1);
          const unsigned hit = __ballot_sync(FULL, s > 0 && r + incl > t);
          if (hit) {  // the first lane whose running sum passes t walks its 4 ids
            const int L = __ffs(hit) - 1;
            int mine = -1, lane_kept = -1;
            double rr = r + (lane == 0 ? 0.0 : before);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              rr += w[j];
              if (keep[j]) lane_kept = i0 + k * SAMPLE_TILE + j;
              if (mine < 0 && w[j] > 0 && rr > t) mine = i0 + k * SAMPLE_TILE + j;
            }
            if (mine < 0) mine = lane_kept;  // the lane's sum passed t, its own walk fell short by a rounding step
            pick = __shfl_sync(FULL, mine, L);
          }
          r += __shfl_sync(FULL, incl, 31);
        }
      }
      if (pick < 0) pick = warp_max_i(blk_kept);  // the record passed t, the walk did not (a rounding step)
    }
    if (pick < 0) pick = s_kept[owner];
    if (lane == 0) *s_pick = pick;
  }
  csync();
  return *s_pick;
}

}  // namespace mk::megakernel::device
