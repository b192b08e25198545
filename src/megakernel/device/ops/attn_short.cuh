// Short-context attention of AttnOProj (inline attention, pos + 1 <= MkParams::attn_short_max, where attn_flat.cuh's
// tiles do not hold [0, pos]: since session 32 the steps past 16 MkParams::attn_flat_tiles positions): the group's q
// heads over positions [0, pos] in three phases whose work is spread over the consumer threads instead of
// chained per warp (version 9; attn_range's online softmax ran ~1200 dependent instructions per thread):
//   1. scores  s[j][p] = q_j . k_p / sqrt(hd): one thread per (q head j, position p), K from the stage;
//   2. softmax one warp per q head: m = max_p s, s[j][p] = e^(s - m), sum[j];
//   3. P.V     warp w takes positions w, w + WARPS, ...; lane l the dims [l * hd / 32, (l + 1) * hd / 32) of
//              every q head; the WARPS partials are added in warp order (deterministic) and divided by sum[j].
// The same arithmetic as the simulator's attend (src/megakernel/sim_ops.cpp: max, then exp, then P.V, then /sum).
// Flag instance only (ops/attention.cuh op_attn_o_proj says why). Measured (H200, 1B, ctx 32, pos 47): the
// attention 85 -> 50 us per SM per step (5.3 -> 3.1 us per AttnOProj); 0.988 -> 0.951 ms/token (bench/RESULTS.md v9).
//
// K/V stage (s_x, issued by attn_short_issue before the dependency wait when that is safe -- attn_preload's
// argument in attention.cuh -- else right after it), C = MkParams::attn_stage positions, NC = hd / 8 chunks of
// 16 B per row: s_k [NC][C | 1] (transposed: a warp of consecutive positions reads consecutive 16 B; the odd row
// stride spreads the copies' writes over the banks), then s_v [C][NC] (row-major: a warp reads one row).
// Positions >= C are read from the cache (L2) in place; position pos comes from this step's k, v (s_pos).
// Scratch in s_aux from s_o's start (params.cuh AttnShortPlan): scores [G][n32], reused for the warp
// partials [WARPS][G][hd] after a barrier; s_pos [2][NC] x 16 B (k, v of pos as bf16); s_sum [G].
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

constexpr int G_MAX = 8;  // q heads per kv head the attention ops support (backend refuses more)

// 8 floats that are bf16 values (exactly representable) -> 8 packed bf16 (the inverse of unpack8).
__device__ __forceinline__ uint4 pack8_bf16(const float* f) {
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) u[i] = (__float_as_uint(f[2 * i]) >> 16) | (__float_as_uint(f[2 * i + 1]) & 0xffff0000u);
  return make_uint4(u[0], u[1], u[2], u[3]);
}

// Cache offset of (pos, kv head g) (paged layout; the block table is L1-cached: written before the launch).
__device__ __forceinline__ int64_t kv_offset(const Ctx& c, int pos, int g) {
  const MkParams& p = c.p;
  const int blk = __ldg(p.block_table + unsigned(pos) / KV_BLOCK);
  const int64_t row = int64_t(blk) * KV_BLOCK + unsigned(pos) % KV_BLOCK;
  return (row * p.L.n_kv_head + g) * p.L.head_dim;
}

// Is this step's attention of an AttnOProj the short path's?
__device__ __forceinline__ bool attn_short_applies(const Ctx& c) { return c.p.L.n_chunks == 1 && c.pos < c.p.attn_short_max; }

// This thread's cp.async of the stage: K and V rows of positions [0, min(pos, C)) of kv head g, layer l.
template <int HD>
__device__ void attn_short_issue_hd(const Ctx& c, int l, int g) {
  constexpr int NC = HD / 8;
  const int C = c.p.attn_stage, CS = C | 1, n_st = min(c.pos, C);
  const MkLayer& w = c.p.layers[l];
  uint4* s_k = reinterpret_cast<uint4*>(c.s_x);
  uint4* s_v = s_k + NC * CS;
  for (int i = threadIdx.x; i < n_st * NC; i += NCT) {
    const int p = i / NC, ch = i % NC;  // consecutive threads: consecutive 16 B of one row
    const int64_t at = kv_offset(c, p, g) + ch * 8;
    cp_async16_ca(s_k + ch * CS + p, w.k_cache + at);
    cp_async16_ca(s_v + p * NC + ch, w.v_cache + at);
  }
}
__device__ __forceinline__ void attn_short_issue(const Ctx& c, int l, int g) {
  if (c.p.L.head_dim == 64) attn_short_issue_hd<64>(c, l, g);
  else attn_short_issue_hd<128>(c, l, g);
}

// q . k over HD dims: q fp32 in shared memory, k as NC 16-byte chunks of bf16 at k[ch * stride] (shared memory)
// or, with GLOBAL, at k[ch] in the cache (L2).
template <int HD, bool GLOBAL>
__device__ __forceinline__ float dot_q_k(const float* q, const uint4* k, int stride) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4  // 4 chunks' loads in flight (fully unrolled, HD = 128 hoisted 16 and spilled)
  for (int ch = 0; ch < HD / 8; ++ch) {
    const uint4 u = GLOBAL ? __ldcg(k + ch) : k[ch * stride];
    const float4 a = *reinterpret_cast<const float4*>(q + 8 * ch), b = *reinterpret_cast<const float4*>(q + 8 * ch + 4);
    d[0] = fmaf(a.x, mk::cuda::bf16_lo(u.x), d[0]);
    d[1] = fmaf(a.y, mk::cuda::bf16_hi(u.x), d[1]);
    d[2] = fmaf(a.z, mk::cuda::bf16_lo(u.y), d[2]);
    d[3] = fmaf(a.w, mk::cuda::bf16_hi(u.y), d[3]);
    d[0] = fmaf(b.x, mk::cuda::bf16_lo(u.z), d[0]);
    d[1] = fmaf(b.y, mk::cuda::bf16_hi(u.z), d[1]);
    d[2] = fmaf(b.z, mk::cuda::bf16_lo(u.w), d[2]);
    d[3] = fmaf(b.w, mk::cuda::bf16_hi(u.w), d[3]);
  }
  return (d[0] + d[1]) + (d[2] + d[3]);
}

// This lane's D = HD / 32 values of a V row (bf16) -> v.
template <int D>
__device__ __forceinline__ void v_lanes(const bf16* row, bool global, float* v) {
  const int lane = threadIdx.x & 31;
  if constexpr (D == 2) {
    const uint32_t* r = reinterpret_cast<const uint32_t*>(row) + lane;
    const uint32_t u = global ? __ldcg(r) : *r;
    v[0] = mk::cuda::bf16_lo(u), v[1] = mk::cuda::bf16_hi(u);
  } else {
    const uint2* r = reinterpret_cast<const uint2*>(row) + lane;
    const uint2 u = global ? __ldcg(r) : *r;
    v[0] = mk::cuda::bf16_lo(u.x), v[1] = mk::cuda::bf16_hi(u.x), v[2] = mk::cuda::bf16_lo(u.y), v[3] = mk::cuda::bf16_hi(u.y);
  }
}

// P.V of one position for the group's G q heads: acc[j][.] += P[j] * v, P[j] = sc[j * stride] (lane: D dims).
template <int D>
__device__ __forceinline__ void pv_accumulate(float (&acc)[G_MAX][D], const float (&v)[D], const float* sc, int stride,
                                              int G) {
#pragma unroll
  for (int j = 0; j < G_MAX; ++j) {
    if (j >= G) break;
    const float pj = sc[j * stride];
#pragma unroll
    for (int e = 0; e < D; ++e) acc[j][e] = fmaf(pj, v[e], acc[j][e]);
  }
}

// Phase 2 of the parallel-phase attention (attn_short_hd), one warp per q head: the head's scores sc[0, n) become
// softmax numerators in place against their max m, and their sum is returned.
__device__ __forceinline__ float softmax_numerators(float* sc, int n, float& m) {
  const int lane = threadIdx.x & 31;
  float t = -INFINITY;
  for (int i = lane; i < n; i += 32) t = fmaxf(t, sc[i]);
  m = warp_max(t);
  float sum = 0.f;
  for (int i = lane; i < n; i += 32) {
    const float e = expf(sc[i] - m);
    sc[i] = e;
    sum += e;
  }
  return warp_sum(sum);
}

// This warp's P.V partials into s_part [WARPS][G][HD] (lane: its D dims), summed in warp order after a barrier.
template <int D, int HD>
__device__ __forceinline__ void store_warp_partials(const float (&acc)[G_MAX][D], float* s_part, int G, int warp,
                                                    int lane) {
#pragma unroll
  for (int j = 0; j < G_MAX; ++j) {
    if (j >= G) break;
    float* r = s_part + (warp * G + j) * HD + lane * D;
#pragma unroll
    for (int e = 0; e < D; ++e) r[e] = acc[j][e];
  }
}

// s_x[j * HD + e] = attention output of q head j (normalised), for the group's G heads. s_h: q heads, k, v of
// this step (attn_prepare: RoPE applied, k/v bf16-rounded). Ends with the stage consumed; the caller's barrier
// publishes s_x.
template <int HD>
__device__ void attn_short_hd(const Ctx& c, int l, int g, const float* s_h) {
  constexpr int NC = HD / 8, D = HD / 32;
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[l];
  const int G = L.group, n = c.pos + 1, n32 = (n + 31) & ~31, C = c.p.attn_stage, CS = C | 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const AttnShortPlan plan = attn_short_plan(G, HD);
  float* s_reg = c.s_aux + (G + 2) * HD;  // s_o's start
  float* s_sc = s_reg;                    // [G][n32]
  float* s_part = s_reg;                  // [WARPS][G][HD], after phase 3's barrier
  uint4* s_pos = reinterpret_cast<uint4*>(s_reg + plan.pos_off);  // [2][NC]: k, v of pos (bf16)
  float* s_sum = s_reg + plan.sum_off;                            // [G]
  const uint4* s_k = reinterpret_cast<const uint4*>(c.s_x);
  const uint4* s_v = s_k + NC * CS;
  for (int t = threadIdx.x; t < 2 * NC; t += NCT) s_pos[t] = pack8_bf16(s_h + G * HD + 8 * t);  // k then v
  cp_async_wait_all();  // this thread's stage copies; the barrier makes every thread's visible
  csync();
  stamp(c, T_ATT_KV);
  // 1. scores: thread per (j, p); a warp holds 32 positions of one q head (q reads are broadcasts).
  const float scale = rsqrtf(float(HD));
  for (int idx = threadIdx.x; idx < G * n32; idx += NCT) {
    const int j = idx / n32, p = idx - j * n32;
    if (p >= n) continue;
    const float* q = s_h + j * HD;
    float d;
    if (p == c.pos) d = dot_q_k<HD, false>(q, s_pos, 1);
    else if (p < C) d = dot_q_k<HD, false>(q, s_k + p, CS);
    else d = dot_q_k<HD, true>(q, reinterpret_cast<const uint4*>(w.k_cache + kv_offset(c, p, g)), 1);
    s_sc[j * n32 + p] = d * scale;
  }
  csync();
  // 2. softmax numerators and sums, one warp per q head (fixed order: the same bits on every SM).
  if (warp < G) {
    float m;
    const float sum = softmax_numerators(s_sc + warp * n32, n, m);
    if (lane == 0) s_sum[warp] = sum;
  }
  csync();
  // 3. P.V: warp w over positions w, w + WARPS, ...; lane over D dims of every q head.
  float acc[G_MAX][D];
#pragma unroll
  for (int j = 0; j < G_MAX; ++j)
#pragma unroll
    for (int e = 0; e < D; ++e) acc[j][e] = 0.f;
  for (int p = warp; p < n; p += WARPS) {
    float v[D];
    if (p == c.pos) v_lanes<D>(reinterpret_cast<const bf16*>(s_pos + NC), false, v);
    else if (p < C) v_lanes<D>(reinterpret_cast<const bf16*>(s_v + p * NC), false, v);
    else v_lanes<D>(w.v_cache + kv_offset(c, p, g), true, v);
    pv_accumulate<D>(acc, v, s_sc + p, n32, G);
  }
  csync();  // every warp is done with the scores (s_part overwrites them) and with the stage (s_x is written below)
  store_warp_partials<D, HD>(acc, s_part, G, warp, lane);
  csync();
  for (int t = threadIdx.x; t < G * HD; t += NCT) {
    float o = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) o += s_part[k * G * HD + t];
    c.s_x[t] = o / s_sum[t / HD];
  }
}

}  // namespace mk::megakernel::device
