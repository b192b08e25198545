// AttnPartial and AttnOProj (isa.h): q/k norm + RoPE of one kv group, the K/V append, attention over a
// range of cached positions, the merge of split partials and the group's split-K O projection.
// Mirrors attend / attn_partial / attn_o_proj in src/megakernel/sim_ops.cpp. The cache is the paged
// bf16 layout of cuda/attention/attention.h; this step's k/v are rounded to bf16 before use, as the
// cache holds them. Inline attention of short contexts runs attn_short.cuh's parallel path (version 9);
// attn_range (online softmax per warp) serves the split chunks and inline contexts past attn_short_max.
//
// Shared memory (s_aux, floats): s_h [(group + 2) * head_dim] (q heads, k, v of this step),
// s_o [group * head_dim], s_m [group], s_s [group], s_wp [warps][group][head_dim + 2] per-warp partials,
// s_rope [head_dim] (cos, then sin, of pos * inv_freq[e] for e < head_dim / 2; MkParams::rope_early).
#pragma once
#include "megakernel/device/common.cuh"
#include "megakernel/device/ops/attn_flat.cuh"
#include "megakernel/device/ops/attn_mma.cuh"
#include "megakernel/device/ops/attn_short.cuh"

namespace mk::megakernel::device {

// s_rope (see above): where it starts in s_aux.
__device__ __forceinline__ float* attn_rope_table(const Ctx& c) {
  const Layout& L = c.p.L;
  const int hd = L.head_dim, G = L.group;
  return c.s_aux + (G + 2) * hd + G * hd + 2 * G + WARPS * G * (hd + 2);
}

// Where attn_preload's K/V of attn_range's first iteration are: the stage in s_x.
__device__ __forceinline__ const uint4* attn_stage(const Ctx& c) { return reinterpret_cast<const uint4*>(c.s_x); }

// attn_prepare's pass over q, k, v of the group in s_h by warp h <= G + 1 (q heads 0..G-1, k = head G, v = head G + 1),
// lane l holding dims l + 32 k (k < NW = head_dim / 32) in registers: Qwen3's q/k RMSNorm, RoPE on q and k (dims e and
// e + head_dim / 2 sit in one lane), k and v rounded to bf16 and appended at pos when `append`. Until session 31 a
// pass and a barrier each for the norm, RoPE and the rounding, over all consumer threads: one pass is -0.7% at
// Qwen3-0.6B, -0.5% at Qwen3-1.7B, 0 at the Llama shapes (bench/RESULTS.md session 31 call 6).
template <int NW>
__device__ __forceinline__ void attn_head_pass(const Ctx& c, const MkLayer& w, int g, bool append, float* s_h) {
  constexpr int HD = 32 * NW, H = NW / 2;  // H: the lane's RoPE pairs (k, k + H)
  const int lane = threadIdx.x & 31, h = threadIdx.x >> 5, G = c.p.L.group;
  float* x = s_h + h * HD;
  float v[NW];
#pragma unroll
  for (int k = 0; k < NW; ++k) v[k] = x[lane + 32 * k];
  if (w.q_norm && h <= G) {
    // The head's norm weights loaded together (inside a loop they were one dependent L2 round trip per 32 dims).
    const float* src = h < G ? w.q_norm : w.k_norm;
    float nw[NW];
#pragma unroll
    for (int k = 0; k < NW; ++k) nw[k] = __ldg(src + lane + 32 * k);
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NW; ++k) ss += v[k] * v[k];
    ss = warp_sum(ss);
    const float inv = 1.f / sqrtf(ss / float(HD) + c.p.eps);
#pragma unroll
    for (int k = 0; k < NW; ++k) v[k] = nw[k] * (v[k] * inv);
  }
  if (h <= G) {
    const float* s_rope = attn_rope_table(c);  // written before the wait; attn_prepare's barrier orders it
#pragma unroll
    for (int k = 0; k < H; ++k) {
      const int e = lane + 32 * k;
      float sn, cs;
      if (c.rope_ready) cs = s_rope[e], sn = s_rope[HD / 2 + e];
      else sincosf(float(c.pos) * c.p.inv_freq[e], &sn, &cs);
      const float x0 = v[k], x1 = v[k + H];
      v[k] = x0 * cs - x1 * sn;
      v[k + H] = x1 * cs + x0 * sn;
    }
  }
  if (h >= G) {  // k (after its RoPE) and v
    const int64_t at = c.at_pos >= 0 ? c.at_pos : kv_offset(c, c.pos, g);
    bf16* cache = h == G ? w.k_cache : w.v_cache;
#pragma unroll
    for (int k = 0; k < NW; ++k) {
      const bf16 b = __float2bfloat16(v[k]);
      v[k] = __bfloat162float(b);
      if (append) cache[at + lane + 32 * k] = b;
    }
  }
#pragma unroll
  for (int k = 0; k < NW; ++k) x[lane + 32 * k] = v[k];
}

// Loads q (group heads), k, v of kv head g from qkv[l] (flag protocol: polls exactly these pairs -- the
// instruction waits only for the QkvProj rows it reads); q/k norm; RoPE; k, v rounded to bf16; appends
// k, v at pos when `append`.
template <bool FLAG>
__device__ void attn_prepare(const Ctx& c, int l, int g, bool append, float* s_h) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[l];
  const int hd = L.head_dim, G = L.group, q_dim = L.n_head * hd, kv_dim = L.n_kv_head * hd;
  const int64_t qkv = L.qkv + int64_t(l) * L.qkv_dim;
  auto src = [&](int i) {
    return i < G * hd ? g * G * hd + i : i < (G + 1) * hd ? q_dim + g * hd + (i - G * hd)
                                                          : q_dim + kv_dim + g * hd + (i - (G + 1) * hd);
  };
  if constexpr (FLAG) {
    // Groups of 4 pairs (hd % 4 == 0, so a group never straddles q / k / v): one load per thread for every supported
    // shape ((G + 2) hd <= 4 NCT), all in flight at once. (Until session 29 each thread polled its elements one after
    // the other, a dependent L2 round trip per element: two for 1B's first 32 threads, three for 8B's.)
    for (int i = 4 * threadIdx.x; i < (G + 2) * hd; i += 4 * NCT) {
      const u64* at = c.p.fws + qkv + src(i);
      Pairs4 q = ld_pairs4(at);
      repoll(c, q, at);
      *reinterpret_cast<float4*>(s_h + i) = val4(q);
    }
  } else {
    for (int i = threadIdx.x; i < (G + 2) * hd; i += NCT) s_h[i] = ld_act(c.p.ws + qkv + src(i));
  }
  csync();
  // One pass, a warp per head of s_h (attn_head_pass); then every thread may read them.
  static_assert(G_MAX + 2 <= WARPS, "a warp per head of the group, its k and its v");
  if (int(threadIdx.x >> 5) <= G + 1) {
    if (hd == 64) attn_head_pass<2>(c, w, g, append, s_h);
    else attn_head_pass<4>(c, w, g, append, s_h);
  }
  csync();
}

constexpr int KU = 2;     // positions per lane in registers in attn_range (4 measured in ptxas: 250 B of spills)
constexpr int HB = 4;     // q heads per pass over K/V (bounds the accumulator registers; v4 had 2, which
                          // read the cache twice for Llama's 4 q heads per kv head)

// Online-softmax update of one lane's accumulators with a score d and its 8 values v.
__device__ __forceinline__ void softmax_update(float d, const float* v, float& m, float& s, float* acc) {
  const float m_new = fmaxf(m, d);
  const float corr = expf(m - m_new), pe = expf(d - m_new);
  s = s * corr + pe;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = acc[e] * corr + pe * v[e];
  m = m_new;
}

// Attention of the group's q heads over positions [p0, p1) ∩ [0, pos]: s_o = sum_p e^(s_p - m) v_p
// (unnormalised), s_m = max score, s_s = sum e^(s_p - m), per q head. One pass over K and V per HB q
// heads: LP = head_dim / 8 lanes share a position (one 16-byte load of K and of V each), a warp holds
// 32 / LP positions at a time, KU per lane in flight (an L2 prefetch of later iterations measured slower, v5;
// removed in v9); online softmax in registers; partials merged
// across a warp's position slots by shuffles and across warps in warp order (deterministic) via s_wp.
__device__ void attn_range(const Ctx& c, int l, int g, int p0, int p1, const float* s_h, float* s_o, float* s_m,
                           float* s_s, float* s_wp) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[l];
  const int hd = L.head_dim, G = L.group;
  const int end = min(p1, c.pos + 1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = WARPS;
  const int LP = hd / 8, PPW = 32 / LP;  // lanes per position, positions per warp
  const int sub = lane % LP, slot = lane / LP, e0 = sub * 8;
  const float scale = rsqrtf(float(hd));
  const float* k_new = s_h + G * hd;
  const float* v_new = s_h + (G + 1) * hd;
  const int stride = n_warp * PPW;
  // attn_preload's loads of the first iteration (this thread's, positions base + u * stride + slot).
  const uint4* stage = attn_stage(c);
  if (c.staged) cp_async_wait_all();
  stamp(c, T_ATT_KV);
  for (int hb0 = 0; hb0 < G; hb0 += HB) {
    float m[HB], s[HB], acc[HB][8];
#pragma unroll
    for (int j = 0; j < HB; ++j) {
      m[j] = -INFINITY, s[j] = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;
    }
    // Uniform trip count per warp (shuffles need all lanes): positions past `end` are masked.
    for (int base = p0 + warp * PPW; base < end; base += KU * stride) {
      // K/V stay packed bf16 in registers (16 instead of 32) and are unpacked where used: this keeps
      // HB = 4 q heads' accumulators without spills. This step's k/v (already bf16-rounded in s_h)
      // are packed back exactly; invalid slots are zeros.
      uint4 kr[KU], vr[KU];
      bool valid[KU];
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        const int p = base + u * stride + slot;
        valid[u] = p < end;
        if (valid[u] && p != c.pos) {
          if (u < 2 && c.staged && base == p0 + warp * PPW) {  // attn_preload stages u = 0, 1
            kr[u] = stage[(2 * u) * NCT + threadIdx.x];
            vr[u] = stage[(2 * u + 1) * NCT + threadIdx.x];
          } else {
            const int64_t at = kv_offset(c, p, g) + e0;
            kr[u] = __ldcg(reinterpret_cast<const uint4*>(w.k_cache + at));
            vr[u] = __ldcg(reinterpret_cast<const uint4*>(w.v_cache + at));
          }
        } else if (valid[u]) {
          kr[u] = pack8_bf16(k_new + e0), vr[u] = pack8_bf16(v_new + e0);
        } else {
          kr[u] = make_uint4(0u, 0u, 0u, 0u), vr[u] = kr[u];
        }
      }
#pragma unroll
      for (int u = 0; u < KU; ++u) {
#pragma unroll
        for (int j = 0; j < HB; ++j) {
          if (hb0 + j >= G) break;
          const float* q = s_h + (hb0 + j) * hd + e0;
          float kf[8];
          unpack8(kr[u], kf);
          float d = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d += q[e] * kf[e];
          for (int o = LP / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          if (valid[u]) {
            float vf[8];
            unpack8(vr[u], vf);
            softmax_update(d * scale, vf, m[j], s[j], acc[j]);
          }
        }
      }
    }
    // Merge the warp's PPW position slots (lanes sub, sub + LP, ...) by shuffles, in slot order.
    for (int o = LP; o < 32; o <<= 1) {
#pragma unroll
      for (int j = 0; j < HB; ++j) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[j], o), so = __shfl_xor_sync(0xffffffffu, s[j], o);
        const float mm = fmaxf(m[j], mo);
        const float fa = s[j] == 0.f ? 0.f : expf(m[j] - mm), fb = so == 0.f ? 0.f : expf(mo - mm);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float ao = __shfl_xor_sync(0xffffffffu, acc[j][e], o);
          // The lower slot's term first: the same sum on both partners.
          acc[j][e] = (lane & o) ? fb * ao + fa * acc[j][e] : fa * acc[j][e] + fb * ao;
        }
        s[j] = (lane & o) ? fb * so + fa * s[j] : fa * s[j] + fb * so;
        m[j] = mm;
      }
    }
    // s_wp[warp][j][hd + 2]: the warp's (acc, m, s) per q head of this pass (slot 0 lanes write).
    if (slot == 0) {
#pragma unroll
      for (int j = 0; j < HB; ++j) {
        if (hb0 + j >= G) break;
        float* r = s_wp + (warp * G + hb0 + j) * (hd + 2);
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e0 + e] = acc[j][e];
        if (sub == 0) r[hd] = m[j], r[hd + 1] = s[j];
      }
    }
  }
  csync();
  const int n_act = n_warp;
  for (int t = threadIdx.x; t < G * hd; t += NCT) {
    const int j = t / hd, e = t % hd;
    float mm = -INFINITY, ss = 0.f, o = 0.f;
    for (int k = 0; k < n_act; ++k) mm = fmaxf(mm, s_wp[(k * G + j) * (hd + 2) + hd]);
    for (int k = 0; k < n_act; ++k) {
      const float* r = s_wp + (k * G + j) * (hd + 2);
      if (r[hd + 1] == 0.f) continue;  // this warp saw no position
      const float f = expf(r[hd] - mm);
      ss += f * r[hd + 1];
      o += f * r[e];
    }
    s_o[t] = o;
    if (e == 0) s_m[j] = mm, s_s[j] = ss;
  }
  csync();
}

// Issued BEFORE the instruction's dependency wait (MkParams::prefetch): the cache offset of (pos, group)
// for the append, and the K/V of positions < pos, cp.async into a stage in s_x: for attn_short (inline, short
// context) the whole stage of attn_short.cuh; else this thread's loads of attn_range's first iteration
// (2 positions x K, V x 16 B per thread, [u][K|V][thread] so that a warp's reads are conflict-free). s_x is
// free until the attention result is written there, after the attention.
// Why this is safe: the block table is written by the host before the launch, and a cached position
// p < pos was appended at an earlier step. Appends of the previous step s - 1 precede (through the
// counters) that step's Argmax, which layer 0's QkvProj of step s waits for, and every instruction of
// step s waits, directly or through its producers, on that QkvProj. So once this SM has passed any wait
// of step s (Ctx::synced; thread 0's acquire + the barrier order this thread's later loads), or at the
// first step of a launch (earlier launches are complete), every position < pos is in memory. Only this
// step's k/v (position pos) and qkv depend on the instruction's own wait; they are loaded after it.
template <bool FLAG, bool SPLIT = false>
__device__ void attn_preload(const Ctx& c, const Instr& in) {
  c.staged = false, c.at_pos = -1, c.rope_ready = false;
  if (!c.p.prefetch) return;
  const Layout& L = c.p.L;
  if (c.p.rope_early) {  // depends on pos only: the same sincosf as attn_prepare's, so the same bits
    float* s_rope = attn_rope_table(c);
    const int half = L.head_dim / 2;
    for (int e = threadIdx.x; e < half; e += NCT) sincosf(float(c.pos) * c.p.inv_freq[e], &s_rope[half + e], &s_rope[e]);
    c.rope_ready = true;
  }
  if (!(c.synced || c.step == 0)) return;
  c.at_pos = kv_offset(c, c.pos, in.group);
  if (!SPLIT && FLAG && in.op == Op::AttnOProj && attn_short_applies(c)) {
    if (attn_flat_applies(c)) attn_flat_issue(c, in.layer, in.group);
    else attn_short_issue(c, in.layer, in.group);
    c.staged = true;
    return;
  }
  if constexpr (SPLIT) {  // AttnPartial (the only op preloaded in SPLIT instances): attn_mma's first tiles
    int p0, p1;
    attn_chunk_range(L, int(in.row_begin), int(in.row_end), in.chunk, c.pos, p0, p1);
    attn_mma_preload(c, in.layer, in.group, p0, max(p0, min(p1, c.pos + 1)));
    c.staged = true;
    return;
  }
  if (size_t(c.p.smem_x_floats) * sizeof(float) < size_t(4 * NCT) * sizeof(uint4)) return;
  const int g = in.group;
  int p0 = 0, p1 = L.max_context;
  if (in.op == Op::AttnPartial) attn_chunk_range(L, int(in.row_begin), int(in.row_end), in.chunk, c.pos, p0, p1);
  const int end = min(p1, c.pos + 1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int LP = L.head_dim / 8, PPW = 32 / LP, slot = lane / LP, e0 = (lane % LP) * 8, stride = WARPS * PPW;
  const MkLayer& w = c.p.layers[in.layer];
  uint4* stage = reinterpret_cast<uint4*>(c.s_x);
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int p = p0 + warp * PPW + u * stride + slot;
    if (p < end && p != c.pos) {
      const int64_t at = kv_offset(c, p, g) + e0;
      cp_async16_ca(stage + (2 * u) * NCT + threadIdx.x, w.k_cache + at);
      cp_async16_ca(stage + (2 * u + 1) * NCT + threadIdx.x, w.v_cache + at);
    }
  }
  c.staged = true;
}

// Session 13: the split attention's merge in the flag protocol's SPLIT instance (interpreter.cu), into s_x[0, G * hd):
// the group's chunk records are first polled into s_x past the merged outputs (merge_stage_offset; every thread's
// loads in flight at once), then merged from shared memory (merge_records, as op_attn_o_proj's merge from
// L2). The merge from L2 reads each value where
// it uses it, each chunk's values behind the test of its sum, with asm volatile loads that are never reordered: a
// chain of dependent round trips (6.6 us per AttnOProj at ctx 4096). Out of line, scalars in (the Ctx's address
// would escape into the call): inlined, such code raised the flag instance's ptxas spill stores.
__device__ __noinline__ void attn_merge_split(const MkParams& p, float* s_x, uint32_t epoch, uint32_t instr, int layer,
                                              int group) {
  const Ctx c{p, s_x, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, epoch, instr, true, false, -1, 0, 0, false};
  const Layout& L = p.L;
  const int hd = L.head_dim, G = L.group;
  const int64_t rec0 = L.att_part + (int64_t(layer) * L.n_kv_head + group) * L.n_chunks * L.att_part_stride;
  float* st = s_x + merge_stage_offset(G, hd);
  poll_region_to(c, p.fws + rec0, L.n_chunks * L.att_part_stride, st);
  merge_records(G, hd, L.n_chunks, L.att_part_stride, s_x, [&](int64_t off) { return st[off]; });
}

// SPLIT (flag protocol, split attention; interpreter.cu): the chunk's attention through attn_mma (tensor cores).
template <bool FLAG, bool SPLIT = false>
__device__ void op_attn_partial(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const int hd = L.head_dim, G = L.group;
  float* s_h = c.s_aux;
  float* s_o = s_h + (G + 2) * hd;
  float* s_m = s_o + G * hd;
  float* s_s = s_m + G;
  float* s_wp = s_s + G;
  int p0, p1;  // static rows or, with Layout::chunk_dynamic, this step's share of [0, pos]
  attn_chunk_range(L, int(in.row_begin), int(in.row_end), in.chunk, c.pos, p0, p1);
  const bool append = p0 <= c.pos && c.pos < p1;
  attn_prepare<FLAG>(c, in.layer, in.group, append, s_h);
  stamp(c, T_PREP1);
  if constexpr (SPLIT) {
    const int64_t rec = L.att_part + ((int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks + in.chunk) * L.att_part_stride;
    attn_mma(c.p, c.s_x, c.s_aux, c.epoch, c.instr, c.pos, in.layer, in.group, p0, min(p1, c.pos + 1), c.staged, rec);
    stamp(c, T_PREP2);
    return;
  }
  attn_range(c, in.layer, in.group, p0, p1, s_h, s_o, s_m, s_s, s_wp);
  stamp(c, T_PREP2);
  const int64_t rec = L.att_part + ((int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks + in.chunk) * L.att_part_stride;
  for (int t = threadIdx.x; t < G * (hd + 2); t += NCT) {
    const int j = t / (hd + 2), e = t % (hd + 2);
    st_act<FLAG>(c, rec + t, e < hd ? s_o[j * hd + e] : e == hd ? s_m[j] : s_s[j]);
  }
}

// SPLIT (flag protocol, split attention; interpreter.cu): only the merge stage's path is compiled; INLINE (greedy flag
// launches without split attention): only the inline paths.
template <bool RING, bool FLAG, bool SPLIT = false, bool INLINE = false>
__device__ void op_attn_o_proj(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const int hd = L.head_dim, G = L.group;
  float* s_h = c.s_aux;
  float* s_o = s_h + (G + 2) * hd;
  float* s_m = s_o + G * hd;
  float* s_s = s_m + G;
  float* s_wp = s_s + G;
  // attn_short runs in the flag instance only (where inline attention publishes by default): in the counter
  // instance (split attention at long contexts) its code raised ptxas's spills and cost 3-4% (v9, RESULTS.md).
  bool short_path = false;
  if constexpr (FLAG && !SPLIT) short_path = L.n_chunks == 1 && attn_short_applies(c);
  if constexpr (SPLIT) {
    attn_merge_split(c.p, c.s_x, c.epoch, c.instr, in.layer, in.group);
  } else if (short_path) {
    // The stage's copies go out now when attn_preload could not issue them before the wait (the same copies).
    const bool flat = attn_flat_applies(c);
    if (!c.staged) {
      if (flat) attn_flat_issue(c, in.layer, in.group);
      else attn_short_issue(c, in.layer, in.group);
    }
    attn_prepare<FLAG>(c, in.layer, in.group, (in.flags & FLAG_APPEND_KV) != 0, s_h);
    stamp(c, T_PREP1);
    if (flat) attn_flat(c, s_h);
    else if (hd == 64) attn_short_hd<64>(c, in.layer, in.group, s_h);
    else attn_short_hd<128>(c, in.layer, in.group, s_h);
    stamp(c, T_PREP2);
  } else if (L.n_chunks == 1) {
    attn_prepare<FLAG>(c, in.layer, in.group, (in.flags & FLAG_APPEND_KV) != 0, s_h);
    stamp(c, T_PREP1);
    attn_range(c, in.layer, in.group, 0, L.max_context, s_h, s_o, s_m, s_s, s_wp);
    stamp(c, T_PREP2);
    for (int t = threadIdx.x; t < G * hd; t += NCT) c.s_x[t] = s_o[t] / s_s[t / hd];
  } else if constexpr (!INLINE) {
    // Merge the chunk partials in chunk order (as the simulator): rescale to the global max. Flag
    // protocol: the group's records are polled first (all threads), then read.
    const int64_t rec0 = L.att_part + (int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks * L.att_part_stride;
    if constexpr (FLAG) poll_region(c, c.p.fws + rec0, L.n_chunks * L.att_part_stride);
    merge_records(G, hd, L.n_chunks, L.att_part_stride, c.s_x, [&](int64_t off) {
      return FLAG ? ld_flag_val(c.p.fws + rec0 + off) : ld_act(c.p.ws + rec0 + off);
    });
  }
  csync();
  // Split-K O projection: this group's G * hd columns of wo, rows [row_begin, row_end); flags + mid_resid: added to
  // resid_mid[l]'s accumulator (isa.h mid_acc_word), else the group's partial o_part[l][g].
  const int64_t out = L.o_part + (int64_t(in.layer) * L.n_kv_head + in.group) * L.n_embd;
  u64* const acc = mid_acc_words(c, in.layer, c.epoch);
  matvec<RING, true>(c, in, c.s_x, [&](int r, float v) {  // narrow rows: ring.cuh
    if (FLAG && L.mid_resid) red_acc(acc + r, v);
    else st_act<FLAG>(c, out + r, v);
  });
}

}  // namespace mk::megakernel::device
