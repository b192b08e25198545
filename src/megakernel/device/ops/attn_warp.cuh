// Short-context attention of AttnOProj with few barriers (version 11, mk7; MkParams::attn_warp, flag instance): the
// same stage and scope as attn_short.cuh (inline attention, pos + 1 <= attn_short_max), but from the q/k/v poll to
// the O projection's matvec only 3 consumer barriers instead of 9 (v9's poll, RoPE, rounding, s_pos, scores,
// softmax, P.V, partials and final barriers each waited for the slowest warp; the work between them is tiny):
//   prepare  one pass: each thread polls the two halves of a RoPE pair (both loads in flight) or one v element,
//            rotates with the table, rounds k / v to bf16, appends them to the cache (FLAG_APPEND_KV), and writes
//            k / v of pos packed to s_pos and, when pos is inside the stage, into the stage itself. (Qwen3's q/k
//            norm needs whole heads: there attn_prepare runs first and the pass only packs.)  -> barrier 1
//            (also publishes every thread's stage copies, cp.async.wait_all before it)
//   attend   warp w = (q head j, index i < WPH = WARPS / G) takes the 32-position blocks i, i + WPH, ... of head
//            j: a lane's score per block, the block max and sum by shuffles, an online-softmax rescale between
//            blocks, P.V with the block's 32 e^(s - m) broadcast by shuffles, lane over hd / 32 dims;
//            (acc, m, sum) per warp to s_aux                                    -> barrier 2
//   merge    thread per (head, dim): the WPH warps' partials merged in warp order (flash-decoding merge), / sum,
//            into s_x                                                           -> the caller's barrier 3
// Deterministic (fixed orders; the K/V bits are the same from the stage or L2), so every SM of a group computes the
// same output, and stage sizes, prefetch and steps per launch do not change it; not bit-identical to attn_short
// (another summation order), both within tolerance of the CPU.
#pragma once
#include "megakernel/device/ops/attn_short.cuh"

namespace mk::megakernel::device {

// Scratch (s_aux from s_o's start, as attn_short's): per-warp partials [G * WPH][HD + 2] (acc, m, sum); s_pos at
// attn_short_plan's pos_off (G * WPH * (HD + 2) <= 14 * (HD + 2) stays below it for every G <= 8).
// At most 8 warps per head: with 15 (G = 1) the partials would reach s_pos.
__device__ __forceinline__ int attn_warps_per_head(int G) { return min(8, max(1, WARPS / G)); }

template <bool FLAG>
__device__ void attn_prepare(const Ctx& c, int l, int g, bool append, float* s_h);  // ops/attention.cuh

// Both halves of a pair polled with their loads in flight together.
__device__ __forceinline__ float2 poll_two(const Ctx& c, const u64* a, const u64* b) {
  const u64 x = ld_flag(a), y = ld_flag(b);
  return make_float2(fresh(x, c.epoch) ? flag_val(x) : poll1(c, a), fresh(y, c.epoch) ? flag_val(y) : poll1(c, b));
}

// k (kv = 0) or v (kv = 1) element e of pos as bf16: s_pos, the stage when pos is in it, the cache on append.
template <int HD>
__device__ __forceinline__ void attn_warp_put(const Ctx& c, const MkLayer& w, int kv, int e, bf16 b, bool append, int64_t at) {
  constexpr int NC = HD / 8;
  const int C = c.p.attn_stage, CS = C | 1;
  bf16* s_pos = reinterpret_cast<bf16*>(c.s_aux + (c.p.L.group + 2) * HD + attn_short_plan(c.p.L.group, HD).pos_off);
  s_pos[kv * HD + e] = b;
  if (c.pos < C) {
    uint4* s_k = reinterpret_cast<uint4*>(c.s_x);
    uint4* row = kv == 0 ? s_k + (e / 8) * CS + c.pos : s_k + NC * CS + c.pos * NC + e / 8;
    reinterpret_cast<bf16*>(row)[e % 8] = b;
  }
  if (append) (kv == 0 ? w.k_cache : w.v_cache)[at + e] = b;
}

// The prepare pass (see above) into s_h [(G + 2) * HD] (q heads rotated, k rotated and rounded, v rounded), ending
// with barrier 1.
template <int HD>
__device__ void attn_warp_prepare(const Ctx& c, int l, int g, bool append, float* s_h) {
  constexpr int half = HD / 2;
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[l];
  const int G = L.group, q_dim = L.n_head * HD, kv_dim = L.n_kv_head * HD;
  const int64_t at = c.at_pos >= 0 ? c.at_pos : kv_offset(c, c.pos, g);
  if (w.q_norm) {  // whole heads first (attn_prepare: poll, norm, RoPE, rounding, append), then only the packing
    attn_prepare<true>(c, l, g, append, s_h);
    for (int e = threadIdx.x; e < 2 * HD; e += NCT) attn_warp_put<HD>(c, w, e / HD, e % HD, __float2bfloat16(s_h[G * HD + e]), false, at);
  } else {
    const u64* f = c.p.fws + L.qkv + int64_t(l) * L.qkv_dim;
    const float* s_rope = attn_rope_table(c);
    const int n_rot = (G + 1) * half;
    for (int i = threadIdx.x; i < n_rot + HD; i += NCT) {
      if (i < n_rot) {
        const int h = i / half, e = i - h * half;
        const int src = h < G ? (g * G + h) * HD + e : q_dim + g * HD + e;
        const float2 x = poll_two(c, f + src, f + src + half);
        float sn, cs;
        if (c.rope_ready) cs = s_rope[e], sn = s_rope[half + e];
        else sincosf(float(c.pos) * c.p.inv_freq[e], &sn, &cs);
        const float y0 = x.x * cs - x.y * sn, y1 = x.y * cs + x.x * sn;
        if (h < G) {
          s_h[h * HD + e] = y0, s_h[h * HD + e + half] = y1;
        } else {
          const bf16 b0 = __float2bfloat16(y0), b1 = __float2bfloat16(y1);
          s_h[G * HD + e] = __bfloat162float(b0), s_h[G * HD + e + half] = __bfloat162float(b1);
          attn_warp_put<HD>(c, w, 0, e, b0, append, at);
          attn_warp_put<HD>(c, w, 0, e + half, b1, append, at);
        }
      } else {
        const int e = i - n_rot;
        const bf16 b = __float2bfloat16(poll1(c, f + q_dim + kv_dim + g * HD + e));
        s_h[(G + 1) * HD + e] = __bfloat162float(b);
        attn_warp_put<HD>(c, w, 1, e, b, append, at);
      }
    }
  }
  attn_stamp(c, T_ATT_PREP);
  cp_async_wait_all();  // this thread's stage copies; the barrier makes every thread's (and s_h, s_pos) visible
  csync();
  attn_stamp(c, T_ATT_KV);
}

// The attend and merge phases (see above): s_x[j * HD + e] = attention output of q head j, normalised. The caller's
// barrier publishes s_x.
template <int HD>
__device__ void attn_warp_hd(const Ctx& c, int l, int g, const float* s_h) {
  constexpr int NC = HD / 8, D = HD / 32;
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[l];
  const int G = L.group, WPH = attn_warps_per_head(G), n = c.pos + 1, C = c.p.attn_stage, CS = C | 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s_wp = c.s_aux + (G + 2) * HD;  // [G * WPH][HD + 2]
  const uint4* s_pos = reinterpret_cast<const uint4*>(s_wp + attn_short_plan(G, HD).pos_off);
  const uint4* s_k = reinterpret_cast<const uint4*>(c.s_x);
  const uint4* s_v = s_k + NC * CS;
  const int j = warp / WPH, wi = warp - j * WPH;
  if (j < G) {
    const float* q = s_h + j * HD;
    const float scale = rsqrtf(float(HD));
    float m = -INFINITY, sum = 0.f, acc[D];
#pragma unroll
    for (int e = 0; e < D; ++e) acc[e] = 0.f;
    for (int b0 = 32 * wi; b0 < n; b0 += 32 * WPH) {
      const int p = b0 + lane, nb = min(32, n - b0);
      float s = -INFINITY;
      if (p < n) {
        float d;
        if (p < C) d = dot_q_k<HD, false>(q, s_k + p, CS);
        else if (p == c.pos) d = dot_q_k<HD, false>(q, s_pos, 1);
        else d = dot_q_k<HD, true>(q, reinterpret_cast<const uint4*>(w.k_cache + kv_offset(c, p, g)), 1);
        s = d * scale;
      }
      const float m_new = fmaxf(m, warp_max(s));  // finite: the block has a position
      const float corr = expf(m - m_new);         // 0 for the first block (m = -inf)
      const float e_p = p < n ? expf(s - m_new) : 0.f;
      sum = sum * corr + warp_sum(e_p);
      m = m_new;
#pragma unroll
      for (int e = 0; e < D; ++e) acc[e] *= corr;
#pragma unroll 4
      for (int i = 0; i < nb; ++i) {
        const int pi = b0 + i;
        const float pe = __shfl_sync(0xffffffffu, e_p, i);
        float v[D];
        if (pi < C) v_lanes<D>(reinterpret_cast<const bf16*>(s_v + pi * NC), false, v);
        else if (pi == c.pos) v_lanes<D>(reinterpret_cast<const bf16*>(s_pos + NC), false, v);
        else v_lanes<D>(w.v_cache + kv_offset(c, pi, g), true, v);
#pragma unroll
        for (int e = 0; e < D; ++e) acc[e] = fmaf(pe, v[e], acc[e]);
      }
    }
    float* r = s_wp + warp * (HD + 2);  // warp = j * WPH + wi
#pragma unroll
    for (int e = 0; e < D; ++e) r[lane * D + e] = acc[e];
    if (lane == 0) r[HD] = m, r[HD + 1] = sum;
  }
  csync();  // every warp's partial is in s_wp, and every warp is done with the stage (s_x is written below)
  for (int t = threadIdx.x; t < G * HD; t += NCT) {
    const int jj = t / HD, e = t - jj * HD;
    const float* r0 = s_wp + jj * WPH * (HD + 2);
    float mm = -INFINITY;
    for (int k = 0; k < WPH; ++k) mm = fmaxf(mm, r0[k * (HD + 2) + HD]);
    float o = 0.f, ss = 0.f;
    for (int k = 0; k < WPH; ++k) {
      const float* r = r0 + k * (HD + 2);
      if (r[HD + 1] == 0.f) continue;  // this warp had no position
      const float fk = expf(r[HD] - mm);
      ss += fk * r[HD + 1];
      o += fk * r[e];
    }
    c.s_x[t] = o / ss;
  }
}

}  // namespace mk::megakernel::device
