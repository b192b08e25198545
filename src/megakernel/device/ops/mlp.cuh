// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp, except that act is
// rounded to bf16 here (as the layered path's decode does: CudaBackend's h_bf16), the simulator keeping fp32.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// Flag protocol, MlpGateUp's first phase: resid_mid[b, e) = resid + o_part[0] + ... + o_part[n_parts - 1] there (the
// order of sum_residual_flag, so the same bits), published flagged. Every (vector, element) pair is one thread's load,
// all in flight at once (one L2 round trip), staged in s_aux; then a thread per element adds in order.
__device__ void mid_resid_slice(const Ctx& c, int64_t resid, int64_t parts, int n_parts, int64_t mid, int b, int e) {
  const int len = e - b, n = 1 + n_parts;
  float* s_v = c.s_aux;  // [n][len] (the backend sizes s_aux for it)
  for (int t = threadIdx.x; t < n * len; t += NCT) {
    const int k = t / len, i = b + t % len;
    s_v[t] = poll1(c, c.p.fws + (k == 0 ? resid : parts + int64_t(k - 1) * c.p.L.n_embd) + i);
  }
  csync();
  for (int i = threadIdx.x; i < len; i += NCT) {
    float x = s_v[i];
    for (int k = 1; k < n; ++k) x += s_v[k * len + i];
    st_act<true>(c, mid + b + i, x);
  }
}

// The act vector of the flag protocol at workspace offset `act`: packed words (poll.cuh act_word) in the first half
// of its pairs' bytes.
__device__ __forceinline__ uint32_t* act_words(const Ctx& c, int64_t act) { return reinterpret_cast<uint32_t*>(c.p.fws + act); }

// Eight consecutive packed words (32 B, two loads): poll_vector's Pairs4 slot shape, twice the elements.
struct Words8 {
  uint4 a, b;
};
__device__ __forceinline__ Words8 ld_words8(const uint32_t* p) { return {ld_words4(p), ld_words4(p + 4)}; }
__device__ __forceinline__ bool fresh_slot(const Words8& q, uint32_t e) {  // common.cuh repoll
  return fresh_word(q.a.x, e) & fresh_word(q.a.y, e) & fresh_word(q.a.z, e) & fresh_word(q.a.w, e) &
         fresh_word(q.b.x, e) & fresh_word(q.b.y, e) & fresh_word(q.b.z, e) & fresh_word(q.b.w, e);
}
__device__ __forceinline__ void ld_slot(Words8& q, const uint32_t* p) { q = ld_words8(p); }

// s_x = the packed words at w (n % 8 == 0) as bf16 pairs (element 2k in the low half of word k of s_x: ring.cuh
// dot8_pair_bx; n / 2 floats of room), poll_vector's form (S slots per thread loaded before any is checked, then the
// stale ones re-polled; no barrier) with slots of 8 words: one round trip up to n = 24 NCT (1B's act; 8B's takes two,
// where pairs took three on 11 warps). More slots spilled (session 19 call 6).
__device__ __forceinline__ void poll_words(const Ctx& c, const uint32_t* w, int n) {
  constexpr int S = 3;
  for (int i0 = 8 * threadIdx.x; i0 < n; i0 += 8 * S * NCT) {
    Words8 q[S];
#pragma unroll
    for (int k = 0; k < S; ++k)
      if (i0 + k * 8 * NCT < n) q[k] = ld_words8(w + i0 + k * 8 * NCT);
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = i0 + k * 8 * NCT;
      if (i < n) {
        repoll(c, q[k], w + i);
        const Words8& v = q[k];  // a word's value is its high half: element i's to the low half of the pair
        *reinterpret_cast<uint4*>(c.s_x + i / 2) = make_uint4(__byte_perm(v.a.x, v.a.y, 0x7632), __byte_perm(v.a.z, v.a.w, 0x7632),
                                                              __byte_perm(v.b.x, v.b.y, 0x7632), __byte_perm(v.b.z, v.b.w, 0x7632));
      }
    }
  }
}

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); act[rows] = silu(gate x) * up x (rounded to bf16).
// Flag protocol with the mid-layer residual (L.mid_resid): two phases. Each instruction first sums and publishes its
// slice of resid_mid[l] (= x), then polls all of resid_mid[l] -- every SM's slice. Before, each SM polled and summed
// the whole of resid and the n_kv_head o_part vectors itself (1B: 147 KB per SM, 3 dependent round trips per thread
// slot, 2 slots for warp 0; 8B: 9): 5.8 us per layer at 1B, 10.8 at 8B (bench/RESULTS.md session 18 call 2).
template <bool RING, bool FLAG>
__device__ void op_mlp_gate_up(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  const int64_t E = L.n_embd;
  const int64_t mid = L.resid_mid + in.layer * E;
  const bool two_phase = FLAG && L.mid_resid;
  if (two_phase) {
    mid_resid_slice(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, mid, int(in.aux_begin),
                    int(in.aux_end));
    poll_vector(c, mid, L.n_embd);
  } else if constexpr (FLAG) {
    sum_residual_flag(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, -1);
  } else {
    sum_residual(c, c.p.ws + L.resid + in.layer * E, c.p.ws + L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, nullptr);
  }
  csync();
  stamp(c, T_PREP1);
  gate_open(c.p, c.step, c.instr);  // the whole input is read: the loader may stream the rest (ring.cuh gated_op)
  // Materialise this instruction's slice of resid_mid[l] (read by the next QkvProj with L.mid_resid).
  if (!two_phase)
    for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_act<FLAG>(c, mid + i, c.s_x[i]);
  rmsnorm_smem(c, w.mlp_norm, L.n_embd, true);
  stamp(c, T_PREP2);
  // Interleaved rows: 2r = gate r, 2r + 1 = up r; a warp's row pair is exactly (gate, up) of one r.
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)]
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { s_gu[r - 2 * r0] = v; });
  csync();
  // act goes out rounded to bf16 (the layered path's precision): flagged as packed words (poll.cuh act_word), so
  // MlpDown polls it in one round trip.
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  for (int r = r0 + threadIdx.x; r < r1; r += NCT) {
    const float g = s_gu[2 * (r - r0)], u = s_gu[2 * (r - r0) + 1], v = g / (1.f + expf(-g)) * u;
    if constexpr (FLAG) st_word(act_words(c, act) + r, act_word(v, c.epoch));
    else c.p.ws[act + r] = __bfloat162float(__float2bfloat16_rn(v));
  }
}

// down[l][rows] = w_down[rows] . act[l]. act sits in s_x as bf16 pairs (its values are bf16 already): half the shared
// memory of floats -- what 8B's ring pages are short of -- and half the x bytes each page's warp reads.
template <bool RING, bool FLAG>
__device__ void op_mlp_down(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  if constexpr (FLAG) {
    poll_words(c, act_words(c, act), L.n_ff);
  } else {
    const auto pair = [](float a, float b) { return (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xffff0000u); };
    for (int i = 4 * threadIdx.x; i < L.n_ff; i += 4 * NCT) {
      const float4 v = ld_act4(c.p.ws + act + i);
      *reinterpret_cast<uint2*>(c.s_x + i / 2) = make_uint2(pair(v.x, v.y), pair(v.z, v.w));
    }
  }
  csync();
  gate_open(c.p, c.step, c.instr);  // the whole input is read: the loader may stream the rest (ring.cuh s_gate)
  const int64_t out = L.down + int64_t(in.layer) * L.n_embd;
  matvec<RING, false, true>(c, in, c.s_x, [&](int r, float v) { st_act<FLAG>(c, out + r, v); });
}

}  // namespace mk::megakernel::device
