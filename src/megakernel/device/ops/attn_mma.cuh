// Session 17: the split chunks' attention (AttnPartial of the SPLIT instances) on the tensor cores, as the layered
// decode kernel (cuda/attention/decode_kernel.cuh) computes it: each of the first MkParams::attn_mma_warps consumer
// warps streams its own 16-key tiles of the chunk (tiles aligned to 16 absolute positions, so a tile never straddles a
// 64-position cache block; warp w takes tiles w, w + AW, ...) by cp.async into a ring of MMA_NS stages of its own in
// s_x; S = Q K^T and O += P V on mma.sync with the group's q heads as the rows (bf16 q and P, f32 sums), the online
// softmax in registers (log2 units): no block barrier per tile -- attn_split's phases cost ~3 us per tile plus
// ~0.014 us per position (bench/RESULTS.md session 16). At the end the warps' partials are merged in warp order
// (deterministic) into attn_range's record: unnormalised o, max score, sum of e^(s - max) per q head.
// Position pos is not in the cache when the first tiles are issued (attn_preload, before the wait): its row is
// zero-filled by the copy and written from s_h (this step's bf16-rounded k, v) once its tile has landed.
#pragma once
#include "cuda/attention/attn_common.cuh"
#include "megakernel/device/common.cuh"
#include "megakernel/device/ops/attn_short.cuh"

namespace mk::megakernel::device {

// This warp's copy of tile `tile` (keys [16 tile, 16 tile + 16)) into `stage` (K then V, rows swizzled): keys outside
// [p0, end) and key pos are zero-filled (src size 0), the others read from the cache. Every lane takes part.
template <int HD>
__device__ __forceinline__ void attn_mma_issue(const Ctx& c, const MkLayer& w, int g, int tile, int p0, int end,
                                               __nv_bfloat16* stage, int lane) {
  constexpr int CH = HD / 8;  // 16-byte chunks per row
  const int key0 = tile * MMA_TK;
  const int64_t base = kv_offset(c, key0, g), rs = int64_t(c.p.L.n_kv_head) * HD;
  __nv_bfloat16* sv = stage + MMA_TK * HD;
#pragma unroll
  for (int j = 0; j < MMA_TK * CH / 32; ++j) {
    const int ci = lane + 32 * j, r = ci / CH, col = (ci % CH) * 8, p = key0 + r;
    const bool ok = p >= p0 && p < end && p != c.pos;
    const int64_t off = ok ? base + r * rs + col : 0;
    cuda::attn::cp_async16(stage + cuda::attn::swz<HD>(r, col), w.k_cache + off, ok ? 16 : 0);
    cuda::attn::cp_async16(sv + cuda::attn::swz<HD>(r, col), w.v_cache + off, ok ? 16 : 0);
  }
}

// The chunk [p0, end)'s tiles: the first, and how many (0 for an empty chunk).
__device__ __forceinline__ void attn_mma_tiles(int p0, int end, int& t_first, int& n_tiles) {
  t_first = p0 / MMA_TK;
  n_tiles = end > p0 ? (end - 1) / MMA_TK - t_first + 1 : 0;
}

// The first MMA_NS - 1 tiles of this warp, one commit group each (attn_preload before the wait, or attn_mma_hd).
template <int HD>
__device__ __forceinline__ void attn_mma_first(const Ctx& c, int l, int g, int p0, int end) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int aw = c.p.attn_mma_warps;
  int t_first, n_tiles;
  attn_mma_tiles(p0, end, t_first, n_tiles);
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(c.s_x) + warp * MMA_NS * (2 * MMA_TK * HD);
#pragma unroll
  for (int i = 0; i < MMA_NS - 1; ++i) {
    if (warp < aw && warp + i * aw < n_tiles)
      attn_mma_issue<HD>(c, c.p.layers[l], g, t_first + warp + i * aw, p0, end, ring + i * (2 * MMA_TK * HD), lane);
    cp_async_commit();
  }
}
__device__ __forceinline__ void attn_mma_preload(const Ctx& c, int l, int g, int p0, int end) {
  if (c.p.L.head_dim == 64) attn_mma_first<64>(c, l, g, p0, end);
  else attn_mma_first<128>(c, l, g, p0, end);
}

// S = Q K^T of one tile (as cuda::attn::warp_qk) with Q's A fragments made per k-step from the f32 q in s_h (rows = q
// heads; rows >= G and 8..15 zero), not held in registers through the loop: ptxas spill stores 64 -> 36 B (head dim
// 64), 408 -> 320 B (128, whose 64 accumulators still do not fit), H200 1B ctx 16384* -3.9%, 8B ctx 4096* -6.0%
// (bench/RESULTS.md session 17, call 6).
template <int HD>
__device__ __forceinline__ void attn_mma_qk(float (&s)[MMA_TK / 8][4], const float* q_row, bool live,
                                            const __nv_bfloat16* k_tile, int lane) {
#pragma unroll
  for (int j = 0; j < MMA_TK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const float2 lo = *reinterpret_cast<const float2*>(q_row + kk * 16);
    const float2 hi = *reinterpret_cast<const float2*>(q_row + kk * 16 + 8);
    const uint32_t a[4] = {live ? cuda::attn::pack_bf16(lo.x, lo.y) : 0u, 0u,
                           live ? cuda::attn::pack_bf16(hi.x, hi.y) : 0u, 0u};
#pragma unroll
    for (int jp = 0; jp < MMA_TK / 16; ++jp) {
      uint32_t b0, b1, b2, b3;
      const int r = jp * 16 + (lane % 8) + 8 * (lane / 16), col = kk * 16 + 8 * ((lane / 8) % 2);
      cuda::attn::ldmatrix_x4(b0, b1, b2, b3, k_tile + cuda::attn::swz<HD>(r, col));
      cuda::attn::mma_bf16(s[2 * jp], a, b0, b1);
      cuda::attn::mma_bf16(s[2 * jp + 1], a, b2, b3);
    }
  }
}

// AttnPartial's attention over [p0, end) (after attn_prepare: s_aux holds q, k, v), the record at rec. `staged`: the
// first tiles were issued by attn_preload.
template <int HD>
__device__ void attn_mma_hd(const Ctx& c, int l, int g, int p0, int end, bool staged, int64_t rec) {
  constexpr int DT = HD / 8, NT = MMA_TK / 8, STAGE = 2 * MMA_TK * HD;
  const int G = c.p.L.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane / 4, t = lane % 4;
  const int aw = c.p.attn_mma_warps;
  const float* s_h = c.s_aux;
  float* s_wp = c.s_aux + (G + 2) * HD + G * HD + 2 * G;  // attn_range's per-warp records [WARPS][G][HD + 2]
  int t_first, n_tiles;
  attn_mma_tiles(p0, end, t_first, n_tiles);
  const int my_tiles = warp < aw && warp < n_tiles ? (n_tiles - warp + aw - 1) / aw : 0;
  if (!staged) attn_mma_first<HD>(c, l, g, p0, end);
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(c.s_x) + warp * MMA_NS * STAGE;
  const MkLayer& w = c.p.layers[l];

  const float* q_row = s_h + (gq < G ? gq : 0) * HD + 2 * t;  // this lane's q row (rows >= G: zero fragments)
  const float sl2 = rsqrtf(float(HD)) * cuda::attn::LOG2E;
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run = -INFINITY, l_run = 0.f;  // row gq: running max (log2 units of the scaled score), this lane's sum

  for (int i = 0; i < my_tiles; ++i) {
    if (i + MMA_NS - 1 < my_tiles)
      attn_mma_issue<HD>(c, w, g, t_first + warp + (i + MMA_NS - 1) * aw, p0, end,
                         ring + ((i + MMA_NS - 1) % MMA_NS) * STAGE, lane);
    cp_async_commit();
    cp_async_wait_group<MMA_NS - 1>();  // tile i has landed (this lane's copies) ...
    __syncwarp();                       // ... and every lane's
    const int key0 = (t_first + warp + i * aw) * MMA_TK;
    __nv_bfloat16* sk = ring + (i % MMA_NS) * STAGE;
    __nv_bfloat16* sv = sk + MMA_TK * HD;
    if (c.pos >= key0 && c.pos < key0 + MMA_TK && c.pos >= p0 && c.pos < end) {  // this step's k, v into their row
      const int r = c.pos - key0;
      for (int e = lane; e < HD / 8; e += 32) {
        *reinterpret_cast<uint4*>(sk + cuda::attn::swz<HD>(r, 8 * e)) = pack8_bf16(s_h + G * HD + 8 * e);
        *reinterpret_cast<uint4*>(sv + cuda::attn::swz<HD>(r, 8 * e)) = pack8_bf16(s_h + (G + 1) * HD + 8 * e);
      }
      __syncwarp();
    }
    float s[NT][4];
    attn_mma_qk<HD>(s, q_row, gq < G, sk, lane);
    if (key0 < p0 || key0 + MMA_TK > end) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + j * 8 + 2 * t + (e & 1);
          if (key < p0 || key >= end) s[j][e] = -INFINITY;
        }
    }
    // Online softmax of row gq (every tile holds a key of [p0, end), so m_new is finite); rows 8..15 are padding.
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[j][0], s[j][1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx * sl2);
    const float alpha = cuda::attn::exp2_mufu(m_run - m_new);  // 0 on the first tile (m_run = -inf)
    m_run = m_new;
    l_run *= alpha;
#pragma unroll
    for (int j = 0; j < DT; ++j) o[j][0] *= alpha, o[j][1] *= alpha;
    uint32_t pf[MMA_TK / 16][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float e0 = cuda::attn::exp2_mufu(fmaf(s[j][0], sl2, -m_new));
      const float e1 = cuda::attn::exp2_mufu(fmaf(s[j][1], sl2, -m_new));
      l_run += e0 + e1;
      pf[j / 2][(j & 1) * 2] = cuda::attn::pack_bf16(e0, e1);
      pf[j / 2][(j & 1) * 2 + 1] = 0u;
    }
    cuda::attn::warp_pv<HD>(o, pf, sv, lane);
    __syncwarp();  // every lane done with stage i % MMA_NS before iteration i + 1 refills it
  }
  cp_async_wait_all();  // (the empty groups of the last iterations)

  // This warp's record: o of row gq (lanes t hold columns 8 j + 2 t, + 1), max in natural units, the row's sum.
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (warp < aw && gq < G) {
    float* r = s_wp + (warp * G + gq) * (HD + 2);
#pragma unroll
    for (int j = 0; j < DT; ++j) *reinterpret_cast<float2*>(r + 8 * j + 2 * t) = make_float2(o[j][0], o[j][1]);
    if (t == 0) r[HD] = m_run * cuda::attn::LN2, r[HD + 1] = my_tiles > 0 ? l_run : 0.f;
  }
  csync();
  for (int i = threadIdx.x; i < G * (HD + 2); i += NCT) {
    const int j = i / (HD + 2), e = i % (HD + 2);
    float mm = -INFINITY;
    for (int k = 0; k < aw; ++k) mm = fmaxf(mm, s_wp[(k * G + j) * (HD + 2) + HD]);
    float v = 0.f;
    if (e == HD) {
      v = mm;
    } else {
      for (int k = 0; k < aw; ++k) {
        const float* r = s_wp + (k * G + j) * (HD + 2);
        if (r[HD + 1] == 0.f) continue;  // this warp saw no position
        v += expf(r[HD] - mm) * r[e];
      }
    }
    st_act<true>(c, rec + i, v);
  }
}

// Out of line, scalars in (as attn_merge_split), one function per head dim: their registers (head dim 128: 64
// accumulators) are then their own and do not raise the SPLIT instances' spills elsewhere.
template <int HD>
__device__ __noinline__ void attn_mma_call(const MkParams& p, float* s_x, float* s_aux, uint32_t epoch, uint32_t instr,
                                           int pos, int layer, int group, int p0, int end, bool staged, int64_t rec) {
  const Ctx c{p, s_x, s_aux, nullptr, nullptr, nullptr, nullptr, 0, pos, epoch, instr, true, staged, -1, 0, 0, 0, false};
  attn_mma_hd<HD>(c, layer, group, p0, end, staged, rec);
}
__device__ __forceinline__ void attn_mma(const MkParams& p, float* s_x, float* s_aux, uint32_t epoch, uint32_t instr,
                                         int pos, int layer, int group, int p0, int end, bool staged, int64_t rec) {
  if (p.L.head_dim == 64) attn_mma_call<64>(p, s_x, s_aux, epoch, instr, pos, layer, group, p0, end, staged, rec);
  else attn_mma_call<128>(p, s_x, s_aux, epoch, instr, pos, layer, group, p0, end, staged, rec);
}

}  // namespace mk::megakernel::device
