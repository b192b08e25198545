// MlpDown (isa.h; mirrors mlp_down in src/megakernel/sim_ops.cpp) and the polls of MlpGateUp's input and of act
// (MlpGateUp itself: ops/norm_matvec.cuh).
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// Do the four accumulator words of q (isa.h mid_acc_word) hold `count` contributions each?
__device__ __forceinline__ bool acc_complete(const Pairs4& q, uint32_t count) {
  return (mid_acc_count(q.a.x) == count) & (mid_acc_count(q.a.y) == count) & (mid_acc_count(q.b.x) == count) &
         (mid_acc_count(q.b.y) == count);
}

// s_x[0, n) = the accumulated vector at w (n % 4 == 0), each word polled until `count` contributions landed: 4 slots
// of 4 words per thread loaded before any is checked (one round trip up to n = 16 NCT), then the stale ones re-polled
// as common.cuh repoll does. No barrier. (Its own re-poll loop: a slot type carrying the count
// through repoll made the greedy flag instance spill 254 B and every step 11% slower: bench/RESULTS.md session 25.)
__device__ __forceinline__ void poll_acc(const Ctx& c, const u64* w, int n, uint32_t count) {
  for (int i0 = 4 * threadIdx.x; i0 < n; i0 += 16 * NCT) {
    Pairs4 q[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i0 + k * 4 * NCT < n) q[k] = ld_pairs4(w + i0 + k * 4 * NCT);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = i0 + k * 4 * NCT;
      if (i < n) {
        if (!acc_complete(q[k], count)) {
          const long long t0 = clock64();
          for (uint32_t r = 0; !acc_complete(q[k], count); ++r) {
            if ((r & 63u) == 1u && flag_poll_expired(c.p, c.instr, t0)) break;
            q[k] = ld_pairs4(w + i);
          }
        }
        *reinterpret_cast<float4*>(c.s_x + i) = make_float4(mid_acc_value(q[k].a.x), mid_acc_value(q[k].a.y),
                                                            mid_acc_value(q[k].b.x), mid_acc_value(q[k].b.y));
      }
    }
  }
}

// The act vector of the flag protocol at workspace offset `act`: packed words (poll.cuh act_word) in the first half
// of its pairs' bytes.
__device__ __forceinline__ uint32_t* act_words(const Ctx& c, int64_t act) { return reinterpret_cast<uint32_t*>(c.p.fws + act); }

// Eight consecutive packed words (32 B, two loads): poll_acc's slot shape, twice the elements.
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
// dot8_pair_bx; n / 2 floats of room), poll_acc's form (S slots per thread loaded before any is checked, then the
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
