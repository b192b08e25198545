// The sampled draw (isa.h SampleParams, SamplePartial + Argmax): the step's next token by the host Sampler's rule
// (runtime/sampler.h; the layered path's cuda/ops/sample.cuh block_sample), spread over the SMs since session 20:
//   candidates x_i = (l_i - m) / T in float, m the max finite logit (non-finite candidates dropped), min-p keeps
//   x_i >= log(min_p), weights exp(x_i) in double walked in ascending id order; the first id whose running sum
//   exceeds u * total, u = philox_uniform(seed, first_draw + step); the last kept id if none does.
// SamplePartial k (every SM; the range of sample_part_tiles tiles of SAMPLE_TILE ids from k * that): m from the LM
// head's amax records (when finite it is the max finite logit: no NaN or +inf anywhere; otherwise one pass over every
// logit finds it), then each warp sums tiles of the range (lane l holds ids 4l..4l+3 of a tile: one 32-byte load of
// pairs; the lane's 4 weights in order, then an inclusive warp scan), thread 0 adds the tile sums in order and
// publishes (sum, last kept id, m) -> sample_part[k]. Argmax (one SM): polls every range's record, warp 0 scans them
// into prefix sums (chunks of 32 lanes plus a carry), every thread finds the first range whose prefix passes
// u * total, the warps redo that range's tile sums (the same arithmetic: the same bits), the tile that passes the
// target, and in it the lane and the id. Sums differ from the host's one sequential sum by rounding only, so a
// different id needs u * total within ~1e-15 of a boundary; where a level's sum passes the target but the walk below
// it falls short by a rounding step, that level's last kept id is taken. Before session 20 one SM weighed all 128k
// logits: ~124 us per step at Llama 3's vocabulary.
// Flag protocol: the logits are flagged pairs in a sampled launch (isa.h), polled by every read; the records too.
// Mirrors: sample_part_sum / sample_pick_part / sample_pick_in_part (src/megakernel/sim_sample.cpp, the same
// arithmetic). Tests: tests/gpu/test_megakernel_sample.cu, tests/megakernel/test_sim_sample.cpp.
#pragma once
#include "core/philox.h"
#include "cuda/common/device.cuh"
#include "megakernel/device/poll.cuh"

namespace mk::megakernel::device {

// Shared scratch of the draw (floats, in s_x): [n_parts] doubles (the ranges' sums, then their prefix sums), [tiles]
// doubles (one range's tile sums), [n_parts] ints (the ranges' last kept ids), [tiles] ints (the tiles').
__host__ __device__ inline int sample_scratch_floats(int n_parts, int tiles) { return 3 * (n_parts + tiles) + 4; }

namespace sample_detail {

constexpr unsigned FULL = 0xffffffffu;

// Four pairs from `a` (32 bytes), the first nv of them re-polled while stale (the rest NaN: padding past the end).
__device__ __forceinline__ void poll4(const MkParams& p, const u64* a, int nv, uint32_t epoch, uint32_t instr,
                                      float (&v)[4]) {
  const Pairs4 q = ld_pairs4(a);
  const u64 e[4] = {q.a.x, q.a.y, q.b.x, q.b.y};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = j >= nv ? NAN : flag_val(fresh(e[j], epoch) ? e[j] : poll_flag(p, a + j, epoch, instr));
}

// The logits of ids i0..i0+3 (i0 % 4 == 0); ids >= n read as NaN (weight 0, never kept). The padding to 4 floats is
// inside the workspace.
template <bool FLAG>
__device__ __forceinline__ void load4(const MkParams& p, int i0, uint32_t epoch, uint32_t instr, float (&v)[4]) {
  const int n = p.L.n_vocab;
  v[0] = v[1] = v[2] = v[3] = NAN;
  if (i0 >= n) return;
  if constexpr (FLAG) {
    poll4(p, p.fws + p.L.logits + i0, n - i0, epoch, instr, v);
  } else {
    const float4 q = ld_act4(p.ws + p.L.logits + i0);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i0 + j >= n) v[j] = NAN;
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
__device__ __forceinline__ Rule make_rule(const MkParams& p, float m) {
  return Rule{m, p.sample.temperature, p.sample.min_p > 0.f ? log(double(p.sample.min_p)) : -INFINITY};
}

// Inclusive scan over the warp's lanes (the same tree everywhere, so the same roundings; sim_sample.cpp tile_at).
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

// This lane's share of the tile at id i0: its 4 weights, their sum in order (s), its last kept id.
struct LaneTile {
  double w[4];
  bool keep[4];
  double s;
  int kept;
};
template <bool FLAG>
__device__ __forceinline__ LaneTile lane_tile(const MkParams& p, const Rule& rule, int tile0, uint32_t epoch,
                                              uint32_t instr) {
  const int i0 = tile0 + 4 * (threadIdx.x & 31);
  float v[4];
  load4<FLAG>(p, i0, epoch, instr, v);
  LaneTile t;
  t.s = 0, t.kept = -1;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    t.w[j] = rule.weight(v[j], t.keep[j]);
    t.s += t.w[j];
    if (t.keep[j]) t.kept = i0 + j;
  }
  return t;
}

// The tile sums and last kept ids of range [r0, r0 + nt tiles) into s_tile / s_tkept (warp w takes tiles w, w + WARPS,
// ...); a barrier after.
template <bool FLAG>
__device__ __forceinline__ void tile_sums(const MkParams& p, const Rule& rule, int r0, int nt, double* s_tile,
                                          int* s_tkept, uint32_t epoch, uint32_t instr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int t = warp; t < nt; t += WARPS) {
    const LaneTile lt = lane_tile<FLAG>(p, rule, r0 + t * SAMPLE_TILE, epoch, instr);
    const double sum = __shfl_sync(FULL, warp_scan(lt.s), 31);
    const int kept = warp_max_i(lt.kept);
    if (lane == 0) s_tile[t] = sum, s_tkept[t] = kept;
  }
  csync();
}

}  // namespace sample_detail

// The max finite logit from the LM head's best value `hint`: the hint itself when finite; otherwise (a NaN or an
// infinity among the logits: rare) one pass over every logit, polled. -inf when none is finite. Every consumer thread
// calls it and gets the value. Scratch: s_red[0, WARPS).
template <bool FLAG>
__device__ __forceinline__ float sample_max(const MkParams& p, float hint, float* s_red, uint32_t epoch, uint32_t instr) {
  if (isfinite(hint)) return hint;
  const int n = p.L.n_vocab, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += NCT) {
    const float l = FLAG ? flag_val(poll_flag(p, p.fws + p.L.logits + i, epoch, instr))
                         : ld_act(p.ws + p.L.logits + i);
    if (isfinite(l)) m = fmaxf(m, l);
  }
  m = mk::cuda::warp_max(m);
  csync();  // s_red may still be read by the caller's broadcast
  if (lane == 0) s_red[warp] = m;
  csync();
  for (int w = 0; w < WARPS; ++w) m = fmaxf(m, s_red[w]);
  return m;
}

// SamplePartial's work (every consumer thread): the weight sum of range `part` ([r0, r1) of the vocabulary) under max
// m -> the record sample_part[part] = (sum low bits, sum high bits, last kept id, m), written by thread 0.
template <bool FLAG>
__device__ void sample_partial(const MkParams& p, int part, int r0, int r1, float m, float* s_x, uint32_t epoch,
                               uint32_t instr) {
  using namespace sample_detail;
  const int nt = (r1 - r0 + SAMPLE_TILE - 1) / SAMPLE_TILE;
  double* s_tile = reinterpret_cast<double*>(s_x);
  int* s_tkept = reinterpret_cast<int*>(s_tile + nt);
  tile_sums<FLAG>(p, make_rule(p, m), r0, nt, s_tile, s_tkept, epoch, instr);
  if (threadIdx.x != 0) return;
  double sum = 0;
  int kept = -1;
  for (int t = 0; t < nt; ++t) sum += s_tile[t], kept = max(kept, s_tkept[t]);
  const float rec[4] = {__int_as_float(__double2loint(sum)), __int_as_float(__double2hiint(sum)), float(kept), m};
  const int64_t off = p.L.sample_part + 4 * int64_t(part);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (FLAG) st_flag(p.fws + off + j, rec[j], epoch);
    else p.ws[off + j] = rec[j];
  }
}

// Argmax's draw (every consumer thread; all get the id, or -1 when no logit is finite): from the ranges' records
// (published by sample_partial with this epoch), draw index `draw`. Scratch: s_x (sample_scratch_floats).
// Not inlined: its registers stay out of the kernel's hot ops.
template <bool FLAG>
__device__ __noinline__ int32_t sample_pick(const MkParams& p, float* s_x, uint32_t epoch, uint32_t instr, uint64_t draw) {
  using namespace sample_detail;
  const Layout& L = p.L;
  const int np = L.n_sample_parts, tpp = L.sample_part_tiles, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double* s_incl = reinterpret_cast<double*>(s_x);  // [np] the ranges' sums, then their inclusive prefix sums
  double* s_tile = s_incl + np;                     // [tpp]
  int* s_pkept = reinterpret_cast<int*>(s_tile + tpp);  // [np]
  int* s_tkept = s_pkept + np;                          // [tpp]
  float* s_m = reinterpret_cast<float*>(s_tkept + tpp);
  int* s_pick = reinterpret_cast<int*>(s_m + 1);
  for (int k = threadIdx.x; k < np; k += NCT) {
    float rec[4];
    if constexpr (FLAG) {
      poll4(p, p.fws + L.sample_part + 4 * int64_t(k), 4, epoch, instr, rec);
    } else {
      const float4 q = ld_act4(p.ws + L.sample_part + 4 * int64_t(k));
      rec[0] = q.x, rec[1] = q.y, rec[2] = q.z, rec[3] = q.w;
    }
    s_incl[k] = __hiloint2double(__float_as_int(rec[1]), __float_as_int(rec[0]));
    s_pkept[k] = int(rec[2]);
    if (k == 0) *s_m = rec[3];
  }
  csync();
  if (warp == 0) {  // prefix sums in chunks of 32 ranges (sim_sample.cpp sample_pick_part)
    double carry = 0;
    for (int base = 0; base < np; base += 32) {
      const int k = base + lane;
      const double incl = carry + warp_scan(k < np ? s_incl[k] : 0.0);
      if (k < np) s_incl[k] = incl;
      carry = __shfl_sync(FULL, incl, 31);
    }
  }
  csync();
  const double target = philox_uniform(p.sample.seed, draw) * s_incl[np - 1];
  int owner = -1;  // the first range whose prefix passes the target (every thread finds the same)
  for (int base = 0; base < np && owner < 0; base += 32) {
    const unsigned hit = __ballot_sync(FULL, base + lane < np && s_incl[base + lane] > target);
    if (hit) owner = base + __ffs(hit) - 1;
  }
  if (owner < 0) {  // u * total rounded past the last range: the last kept id of all, as the host
    int last = -1;
    for (int k = 0; k < np; ++k) last = max(last, s_pkept[k]);
    return last;
  }
  const double t = target - (owner == 0 ? 0.0 : s_incl[owner - 1]);  // in the range's own running sums
  const Rule rule = make_rule(p, *s_m);
  int r0, r1;
  L.sample_part_range(owner, r0, r1);
  const int nt = (r1 - r0 + SAMPLE_TILE - 1) / SAMPLE_TILE;
  tile_sums<FLAG>(p, rule, r0, nt, s_tile, s_tkept, epoch, instr);
  double r = 0;  // the tile whose end passes t, in sample_partial's order
  int tile = -1;
  for (int k = 0; k < nt && tile < 0; ++k) {
    if (r + s_tile[k] > t) tile = k;
    else r += s_tile[k];
  }
  if (tile < 0) return s_pkept[owner];  // the record passed t, the walk did not (a rounding step)
  if (warp == tile % WARPS) {           // that tile's lanes again, with tile_sums' arithmetic
    const LaneTile lt = lane_tile<FLAG>(p, rule, r0 + tile * SAMPLE_TILE, epoch, instr);
    const double incl = warp_scan(lt.s), before = __shfl_up_sync(FULL, incl, 1);
    const unsigned hit = __ballot_sync(FULL, lt.s > 0 && r + incl > t);
    int pick = s_tkept[tile];  // the tile's sum passed t, no lane's did (a rounding step)
    if (hit) {                 // the first lane whose running sum passes t walks its 4 ids
      const int L0 = __ffs(hit) - 1;
      int mine = -1, lane_kept = -1;
      double rr = r + (lane == 0 ? 0.0 : before);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        rr += lt.w[j];
        if (lt.keep[j]) lane_kept = r0 + tile * SAMPLE_TILE + 4 * lane + j;
        if (mine < 0 && lt.w[j] > 0 && rr > t) mine = r0 + tile * SAMPLE_TILE + 4 * lane + j;
      }
      if (mine < 0) mine = lane_kept;  // the lane's sum passed t, its own walk fell short by a rounding step
      pick = __shfl_sync(FULL, mine, L0);
    }
    if (lane == 0) *s_pick = pick;
  }
  csync();
  return *s_pick;
}

}  // namespace mk::megakernel::device
