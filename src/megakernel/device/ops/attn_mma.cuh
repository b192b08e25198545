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

// Head dim 128 runs in pairs of warps that share one tile stage: both compute S and the softmax, each accumulates half
// of the dims (32 accumulators instead of 64, which spill at the kernel's 128 registers per thread). Measured (H200,
// bench/RESULTS.md session 18 call 1): 8B ctx 4096* 5.786 -> 5.485 ms/token, 16384* 6.677 -> 6.193, Qwen3-1.7B 4096*
// 2.208 -> 1.859 against a warp per stream.
template <int HD>
__host__ __device__ constexpr bool attn_mma_pairs() { return HD == 128; }

// The copy of tile `tile` (keys [16 tile, 16 tile + 16)) into `stage` (K then V, rows swizzled) by the NTH threads
// that share it (tid: this thread's index among them): keys outside [p0, end) and key pos are zero-filled (src size
// 0), the others read from the cache. Every one of the NTH threads takes part.
template <int HD, int NTH = 32>
__device__ __forceinline__ void attn_mma_issue(const Ctx& c, const MkLayer& w, int g, int tile, int p0, int end,
                                               __nv_bfloat16* stage, int tid) {
  constexpr int CH = HD / 8;  // 16-byte chunks per row
  const int key0 = tile * MMA_TK;
  const int64_t base = kv_offset(c, key0, g), rs = int64_t(c.p.L.n_kv_head) * HD;
  __nv_bfloat16* sv = stage + MMA_TK * HD;
#pragma unroll
  for (int j = 0; j < MMA_TK * CH / NTH; ++j) {
    const int ci = tid + NTH * j, r = ci / CH, col = (ci % CH) * 8, p = key0 + r;
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

// Pairs that stream tiles: one per warp whose stages fit (MkParams::attn_mma_warps), at most WARPS / 2.
__device__ __forceinline__ int attn_mma_n_pairs(int aw) { return min(aw, WARPS / 2); }

// The first MMA_NS tiles of this warp (or, attn_mma_pairs, of its pair) -- every stage of its ring, one commit group
// each (attn_preload before the wait, or attn_mma_hd): at 1B ctx 4096 (~17 tiles per chunk over 10 streams of 2
// stages) the whole chunk is then in flight before the dependency wait (session 26; MMA_NS - 1 tiles before it, the
// rest behind a DRAM round trip after it).
template <int HD>
__device__ __forceinline__ void attn_mma_first(const Ctx& c, int l, int g, int p0, int end) {
  constexpr bool PAIRS = attn_mma_pairs<HD>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int streams = PAIRS ? attn_mma_n_pairs(c.p.attn_mma_warps) : c.p.attn_mma_warps;
  const int me = PAIRS ? warp / 2 : warp, tid = PAIRS ? (warp % 2) * 32 + lane : lane;
  int t_first, n_tiles;
  attn_mma_tiles(p0, end, t_first, n_tiles);
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(c.s_x) + me * MMA_NS * (2 * MMA_TK * HD);
#pragma unroll
  for (int i = 0; i < MMA_NS; ++i) {
    if (me < streams && me + i * streams < n_tiles)
      attn_mma_issue<HD, PAIRS ? 64 : 32>(c, c.p.layers[l], g, t_first + me + i * streams, p0, end,
                                          ring + i * (2 * MMA_TK * HD), tid);
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

// Keys of the tile at key0 outside [p0, end) get score -inf (S's fragment layout: lane t holds keys 8 j + 2 t, + 1).
__device__ __forceinline__ void attn_mma_mask(float (&s)[MMA_TK / 8][4], int key0, int p0, int end, int t) {
  if (key0 >= p0 && key0 + MMA_TK <= end) return;
#pragma unroll
  for (int j = 0; j < MMA_TK / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + j * 8 + 2 * t + (e & 1);
      if (key < p0 || key >= end) s[j][e] = -INFINITY;
    }
}

// One tile's online softmax of row gq (every tile holds a key of [p0, end), so m_new is finite; rows 8..15 are
// padding): the running max m_run (log2 units of the scaled score), this lane's sum l_run and the N accumulator
// blocks o rescaled by e^(m_old - m_new); the tile's P (bf16) as the A fragment of P V.
template <int N>
__device__ __forceinline__ void attn_mma_softmax(const float (&s)[MMA_TK / 8][4], float sl2, float& m_run, float& l_run,
                                                 float (&o)[N][4], uint32_t (&pf)[MMA_TK / 16][4]) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < MMA_TK / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][0], s[j][1]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m_run, mx * sl2);
  const float alpha = cuda::attn::exp2_mufu(m_run - m_new);  // 0 on the first tile (m_run = -inf)
  m_run = m_new;
  l_run *= alpha;
#pragma unroll
  for (int j = 0; j < N; ++j) o[j][0] *= alpha, o[j][1] *= alpha;
#pragma unroll
  for (int j = 0; j < MMA_TK / 8; ++j) {
    const float e0 = cuda::attn::exp2_mufu(fmaf(s[j][0], sl2, -m_new));
    const float e1 = cuda::attn::exp2_mufu(fmaf(s[j][1], sl2, -m_new));
    l_run += e0 + e1;
    pf[j / 2][(j & 1) * 2] = cuda::attn::pack_bf16(e0, e1);
    pf[j / 2][(j & 1) * 2 + 1] = 0u;
  }
}

// One 16-key tile of a stream (sk / sv: its K and V in the swizzled layout): S = Q K^T, keys outside [p0, end) masked,
// the online softmax, O += P V over this warp's columns of V (half of them with attn_mma_pairs).
template <int HD, int NACC>
__device__ __forceinline__ void attn_mma_tile(const float* q_row, bool live, const __nv_bfloat16* sk,
                                              const __nv_bfloat16* sv, int key0, int p0, int end, float sl2,
                                              float& m_run, float& l_run, float (&o)[NACC][4], int half, int lane) {
  float s[MMA_TK / 8][4];
  attn_mma_qk<HD>(s, q_row, live, sk, lane);
  attn_mma_mask(s, key0, p0, end, lane % 4);
  uint32_t pf[MMA_TK / 16][4];
  attn_mma_softmax(s, sl2, m_run, l_run, o, pf);
#pragma unroll
  for (int dp = 0; dp < NACC / 2; ++dp) {  // P V over this warp's columns of V (one 16-key k-step)
    uint32_t b0, b1, b2, b3;
    const int r = (lane % 8) + 8 * ((lane / 8) % 2), col = half * (HD / 2) + dp * 16 + 8 * (lane / 16);
    cuda::attn::ldmatrix_x4_trans(b0, b1, b2, b3, sv + cuda::attn::swz<HD>(r, col));
    cuda::attn::mma_bf16(o[2 * dp], pf[0], b0, b1);
    cuda::attn::mma_bf16(o[2 * dp + 1], pf[0], b2, b3);
  }
}

// This thread's part of its stream's record in s_wp [streams][G][HD + 2]: the N accumulator blocks of row gq from
// column col0 (lanes t hold columns 8 j + 2 t, + 1); with `scalars` also the max in natural units and the row's sum.
template <int HD, int N>
__device__ __forceinline__ void attn_mma_record(float* s_wp, int stream, int G, int gq, int t, int col0,
                                                const float (&o)[N][4], float m_run, float l_run, bool scalars,
                                                bool any) {
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (gq >= G) return;
  float* r = s_wp + (stream * G + gq) * (HD + 2);
#pragma unroll
  for (int j = 0; j < N; ++j) *reinterpret_cast<float2*>(r + col0 + 8 * j + 2 * t) = make_float2(o[j][0], o[j][1]);
  if (scalars && t == 0) r[HD] = m_run * cuda::attn::LN2, r[HD + 1] = any ? l_run : 0.f;
}

// out[0, G * hd) = n records of (o [G][hd + 2] with max and sum per q head; record k at k * stride) merged in record
// order (as the simulator): each record's o rescaled to the global max, summed, divided by the rescaled sums; records
// with a zero sum are empty. ld(off) reads the float at offset off (shared memory, or L2). Serves the split chunks'
// merge (ops/attention.cuh) and attn_flat's streams.
template <class Ld>
__device__ __forceinline__ void merge_records(int G, int hd, int n, int64_t stride, float* out, Ld&& ld) {
  for (int t = threadIdx.x; t < G * hd; t += NCT) {
    const int j = t / hd, e = t % hd;
    float m = -INFINITY, sum = 0.f, acc = 0.f;
#pragma unroll 8
    for (int k = 0; k < n; ++k) m = fmaxf(m, ld(int64_t(k) * stride + j * (hd + 2) + hd));
#pragma unroll 8
    for (int k = 0; k < n; ++k) {
      const int64_t r = int64_t(k) * stride + j * (hd + 2);
      const float s = ld(r + hd + 1);
      if (s == 0.f) continue;  // empty record
      const float f = expf(ld(r + hd) - m);
      sum += f * s;
      acc += f * ld(r + e);
    }
    out[t] = acc / sum;
  }
}

// The streams' records merged in stream order (deterministic) into attn_range's record at rec (after a barrier).
template <int HD>
__device__ __forceinline__ void attn_mma_merge(const Ctx& c, const float* s_wp, int streams, int G, int64_t rec) {
  for (int i = threadIdx.x; i < G * (HD + 2); i += NCT) {
    const int j = i / (HD + 2), e = i % (HD + 2);
    float mm = -INFINITY;
    for (int k = 0; k < streams; ++k) mm = fmaxf(mm, s_wp[(k * G + j) * (HD + 2) + HD]);
    float v = 0.f;
    if (e == HD) {
      v = mm;
    } else {
      for (int k = 0; k < streams; ++k) {
        const float* r = s_wp + (k * G + j) * (HD + 2);
        if (r[HD + 1] == 0.f) continue;  // this stream saw no position
        v += expf(r[HD] - mm) * r[e];
      }
    }
    st_act<true>(c, rec + i, v);
  }
}

// This step's k, v (s_h, bf16-rounded) into row r of the tile in sk / sv (the copy zero-filled it), by one warp.
template <int HD>
__device__ __forceinline__ void attn_mma_pos_row(const float* s_h, int G, int r, __nv_bfloat16* sk, __nv_bfloat16* sv,
                                                 int lane) {
  for (int e = lane; e < HD / 8; e += 32) {
    *reinterpret_cast<uint4*>(sk + cuda::attn::swz<HD>(r, 8 * e)) = pack8_bf16(s_h + G * HD + 8 * e);
    *reinterpret_cast<uint4*>(sv + cuda::attn::swz<HD>(r, 8 * e)) = pack8_bf16(s_h + (G + 1) * HD + 8 * e);
  }
}

// Barrier of the two warps of pair `pair` (named barriers 2..8; 1 is csync's).
__device__ __forceinline__ void attn_mma_pair_sync(int pair) { asm volatile("bar.sync %0, 64;" ::"r"(2 + pair) : "memory"); }

// AttnPartial's attention over [p0, end) (after attn_prepare: s_aux holds q, k, v), the record at rec. `staged`: the
// first tiles were issued by attn_preload. A stream of tiles is one warp, or with attn_mma_pairs a pair of warps that
// load each tile together into the pair's ring, both compute S and the softmax (the same values), and warp half h
// accumulates P V for dims [h HD / 2, (h + 1) HD / 2); a stream's barrier (warp or pair) follows the tile's landing
// and ends each tile (before the next iteration refills the stage read last).
template <int HD>
__device__ void attn_mma_hd(const Ctx& c, int l, int g, int p0, int end, bool staged, int64_t rec) {
  constexpr bool PAIRS = attn_mma_pairs<HD>();
  constexpr int NACC = PAIRS ? HD / 16 : HD / 8;  // 8-column accumulator blocks of this warp's dims
  constexpr int STAGE = 2 * MMA_TK * HD;
  const int G = c.p.L.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane / 4, t = lane % 4;
  const int streams = PAIRS ? attn_mma_n_pairs(c.p.attn_mma_warps) : c.p.attn_mma_warps;
  const int me = PAIRS ? warp / 2 : warp, half = PAIRS ? warp % 2 : 0;
  const float* s_h = c.s_aux;
  float* s_wp = c.s_aux + (G + 2) * HD + G * HD + 2 * G;  // attn_range's per-warp records [WARPS][G][HD + 2]
  int t_first, n_tiles;
  attn_mma_tiles(p0, end, t_first, n_tiles);
  const int my_tiles = me < streams && me < n_tiles ? (n_tiles - me + streams - 1) / streams : 0;
  if (!staged) attn_mma_first<HD>(c, l, g, p0, end);
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(c.s_x) + me * MMA_NS * STAGE;
  const MkLayer& w = c.p.layers[l];
  auto stream_sync = [&] {
    if constexpr (PAIRS) attn_mma_pair_sync(me);
    else __syncwarp();
  };

  const float* q_row = s_h + (gq < G ? gq : 0) * HD + 2 * t;  // this lane's q row (rows >= G: zero fragments)
  const float sl2 = rsqrtf(float(HD)) * cuda::attn::LOG2E;
  float o[NACC][4];
#pragma unroll
  for (int j = 0; j < NACC; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_run = -INFINITY, l_run = 0.f;  // row gq: running max (log2 units of the scaled score), this lane's sum

  for (int i = 0; i < my_tiles; ++i) {
    // Committed so far: MMA_NS groups (attn_mma_first) + one per earlier iteration, so at most MMA_NS - 1 pending
    // means groups 0..i are complete.
    cp_async_wait_group<MMA_NS - 1>();  // tile i has landed (this thread's copies) ...
    stream_sync();                      // ... and the stream's
    const int key0 = (t_first + me + i * streams) * MMA_TK;
    __nv_bfloat16* sk = ring + (i % MMA_NS) * STAGE;
    __nv_bfloat16* sv = sk + MMA_TK * HD;
    if (c.pos >= key0 && c.pos < key0 + MMA_TK && c.pos >= p0 && c.pos < end) {  // the same branch in a pair's warps
      if (half == 0) attn_mma_pos_row<HD>(s_h, G, c.pos - key0, sk, sv, lane);
      stream_sync();
    }
    attn_mma_tile<HD>(q_row, gq < G, sk, sv, key0, p0, end, sl2, m_run, l_run, o, half, lane);
    stream_sync();  // the stream is done with stage i % MMA_NS: tile i + MMA_NS refills it
    if (i + MMA_NS < my_tiles)
      attn_mma_issue<HD, PAIRS ? 64 : 32>(c, w, g, t_first + me + (i + MMA_NS) * streams, p0, end,
                                          ring + (i % MMA_NS) * STAGE, half * 32 + lane);
    cp_async_commit();
  }
  cp_async_wait_all();  // (the empty groups of the last iterations)
  stamp(c, T_ATT_KV);   // the timing report's "tile loop": stream 0's, to here from attn_prepare's end
  if (me < streams)
    attn_mma_record<HD>(s_wp, me, G, gq, t, half * (HD / 2), o, m_run, l_run, half == 0, my_tiles > 0);
  csync();
  attn_mma_merge<HD>(c, s_wp, streams, G, rec);
}

// Out of line, scalars in (as attn_merge_split), one function per head dim: their registers (the accumulators) are
// then their own and do not raise the SPLIT instances' spills elsewhere.
template <int HD>
__device__ __noinline__ void attn_mma_call(const MkParams& p, float* s_x, float* s_aux, uint32_t epoch, uint32_t instr,
                                           int pos, int layer, int group, int p0, int end, bool staged, int64_t rec) {
  const Ctx c{p, s_x, s_aux, nullptr, nullptr, nullptr, nullptr, 0, pos, epoch, instr, true, staged, -1, 0, 0, false};
  attn_mma_hd<HD>(c, layer, group, p0, end, staged, rec);
}
__device__ __forceinline__ void attn_mma(const MkParams& p, float* s_x, float* s_aux, uint32_t epoch, uint32_t instr,
                                         int pos, int layer, int group, int p0, int end, bool staged, int64_t rec) {
  if (p.L.head_dim == 64) attn_mma_call<64>(p, s_x, s_aux, epoch, instr, pos, layer, group, p0, end, staged, rec);
  else attn_mma_call<128>(p, s_x, s_aux, epoch, instr, pos, layer, group, p0, end, staged, rec);
}

}  // namespace mk::megakernel::device
