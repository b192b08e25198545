// Session 32: inline attention of short contexts (AttnOProj, flag instance) on the tensor cores, from a flat stage.
// attn_short's phases (scores of every (head, position) pair, a softmax warp per head, P.V over the warps, partials
// summed) took 2.7 us per AttnOProj at 1B and Qwen3-0.6B, 3.6 at 8B (H200, position ~48: scores 0.86-1.38 us,
// softmax 0.46, P.V 0.87-1.09, the rest 0.3-0.7; bench/RESULTS.md session 32 call 2), and that time goes ~1:1 into
// the step. Here the stage holds positions [0, 16 T) as attn_mma's swizzled 16-key tiles ([t][K | V][16][hd], bf16),
// all issued before the dependency wait (attn_preload; this step's position pos is written from s_h after
// attn_prepare, keys past pos are zero-filled); stream s (a warp, or with attn_mma_pairs a pair of warps) computes
// tiles s, s + streams, ... as attn_mma_hd does (bf16 q and P, f32 sums, online softmax in registers), with no
// copies and no barrier in its loop; one barrier, then the streams' records are merged in stream order
// (deterministic) and normalised into s_x. Serves pos + 1 <= 16 MkParams::attn_flat_tiles; past that attn_short.
// Measured (H200, ABBA against attn_short, session 32 call 3): AttnOProj's attention 43 -> 29 us per SM per step at 1B,
// 75 -> 49 at Qwen3-0.6B; ms/token 1B -2.4%, Qwen3-0.6B -8.4%, Qwen3-1.7B -4.7%.
#pragma once
#include "megakernel/device/ops/attn_mma.cuh"

namespace mk::megakernel::device {

// Does this step's AttnOProj (short path) take the flat stage?
__device__ __forceinline__ bool attn_flat_applies(const Ctx& c) { return c.pos < MMA_TK * c.p.attn_flat_tiles; }

// This thread's cp.async of the flat stage (see above): K and V rows of positions [0, 16 ceil((pos + 1) / 16)).
template <int HD>
__device__ void attn_flat_issue_hd(const Ctx& c, int l, int g) {
  constexpr int CH = HD / 8;  // 16-byte chunks per row
  const int rows = (c.pos + MMA_TK) / MMA_TK * MMA_TK;
  const MkLayer& w = c.p.layers[l];
  __nv_bfloat16* st = reinterpret_cast<__nv_bfloat16*>(c.s_x);
  for (int ci = threadIdx.x; ci < rows * CH; ci += NCT) {
    const int p = ci / CH, col = (ci % CH) * 8;
    if (p == c.pos) continue;  // written from s_h (attn_flat_hd)
    const bool ok = p < c.pos;
    const int64_t off = ok ? kv_offset(c, p, g) + col : 0;
    __nv_bfloat16* sk = st + (p / MMA_TK) * (2 * MMA_TK * HD);
    cuda::attn::cp_async16(sk + cuda::attn::swz<HD>(p % MMA_TK, col), w.k_cache + off, ok ? 16 : 0);
    cuda::attn::cp_async16(sk + MMA_TK * HD + cuda::attn::swz<HD>(p % MMA_TK, col), w.v_cache + off, ok ? 16 : 0);
  }
}
__device__ __forceinline__ void attn_flat_issue(const Ctx& c, int l, int g) {
  if (c.p.L.head_dim == 64) attn_flat_issue_hd<64>(c, l, g);
  else attn_flat_issue_hd<128>(c, l, g);
}

// The streams' tiles and the merge (see above), after the stage is complete and visible. Out of line, scalars in (as
// attn_mma_call): the accumulators' registers stay out of the flag instance's other code.
template <int HD>
__device__ __noinline__ void attn_flat_compute(const MkParams& p, float* s_x, const float* s_aux, int pos) {
  constexpr bool PAIRS = attn_mma_pairs<HD>();
  constexpr int NACC = PAIRS ? HD / 16 : HD / 8;  // 8-column accumulator blocks of this warp's dims
  constexpr int STAGE = 2 * MMA_TK * HD;
  const int G = p.L.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane / 4, t = lane % 4;
  const int streams = PAIRS ? WARPS / 2 : WARPS;
  const int me = PAIRS ? warp / 2 : warp, half = PAIRS ? warp % 2 : 0;
  float* s_wp = const_cast<float*>(s_aux) + (G + 2) * HD + G * HD + 2 * G;  // [streams][G][HD + 2], as attn_mma
  const __nv_bfloat16* stage = reinterpret_cast<const __nv_bfloat16*>(s_x);
  const int n = pos + 1, n_tiles = (n + MMA_TK - 1) / MMA_TK;
  const float* q_row = s_aux + (gq < G ? gq : 0) * HD + 2 * t;
  const float sl2 = rsqrtf(float(HD)) * cuda::attn::LOG2E;
  float o[NACC][4];
#pragma unroll
  for (int j = 0; j < NACC; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run = -INFINITY, l_run = 0.f;
  if (me < streams) {
    for (int tile = me; tile < n_tiles; tile += streams) {
      const __nv_bfloat16* sk = stage + tile * STAGE;
      attn_mma_tile<HD>(q_row, gq < G, sk, sk + MMA_TK * HD, tile * MMA_TK, 0, n, sl2, m_run, l_run, o, half, lane);
    }
    attn_mma_record<HD>(s_wp, me, G, gq, t, half * (HD / 2), o, m_run, l_run, half == 0, me < n_tiles);
  }
  csync();  // the stage is consumed: s_x[0, G HD) takes the output
  merge_records(G, HD, streams, G * (HD + 2), s_x, [&](int64_t off) { return s_wp[off]; });
}

// s_x[j * HD + e] = attention output of q head j (normalised) for the group's heads (s_h: q heads, k, v of this step
// after attn_prepare). The caller's barrier publishes s_x.
template <int HD>
__device__ __forceinline__ void attn_flat_hd(const Ctx& c, const float* s_h) {
  __nv_bfloat16* sk = reinterpret_cast<__nv_bfloat16*>(c.s_x) + (c.pos / MMA_TK) * (2 * MMA_TK * HD);
  if (threadIdx.x < 32) attn_mma_pos_row<HD>(s_h, c.p.L.group, c.pos % MMA_TK, sk, sk + MMA_TK * HD, threadIdx.x);
  cp_async_wait_all();  // this thread's stage copies; the barrier makes every thread's visible
  csync();
  stamp(c, T_ATT_KV);
  attn_flat_compute<HD>(c.p, c.s_x, c.s_aux, c.pos);
}
__device__ __forceinline__ void attn_flat(const Ctx& c, const float* s_h) {
  if (c.p.L.head_dim == 64) attn_flat_hd<64>(c, s_h);
  else attn_flat_hd<128>(c, s_h);
}

}  // namespace mk::megakernel::device
