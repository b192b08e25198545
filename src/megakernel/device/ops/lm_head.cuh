// LmHead and Argmax (isa.h). Mirrors lm_head / argmax in src/megakernel/sim_ops.cpp. A sampled launch's Argmax
// draws instead (ops/sample.cuh).
#pragma once
#include "megakernel/device/common.cuh"
#include "megakernel/device/ops/sample.cuh"

namespace mk::megakernel::device {

// The block's argmax from each consumer warp's candidate (lane 0's best / best_i) through s_aux; true in thread 0,
// which then holds the winner (argmax_better is a total order, so the fold order does not matter).
__device__ __forceinline__ bool block_argmax(const Ctx& c, float& best, int& best_i) {
  float* s_val = c.s_aux;
  int* s_idx = reinterpret_cast<int*>(c.s_aux + WARPS);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s_val[warp] = best, s_idx[warp] = best_i;
  csync();
  if (threadIdx.x != 0) return false;
  for (int k = 1; k < int(WARPS); ++k)
    if (argmax_better(s_val[k], s_idx[k], best, best_i)) best = s_val[k], best_i = s_idx[k];
  return true;
}

// Final residual; rmsnorm(final_norm); logits[rows]; the slice's argmax -> amax[slice].
// Version 10, the dynamic LM head (MkParams::lm_dynamic, isa.h Layout::lm_unit_rows): the rows come page by page
// in the order the loader got them (its static units, then its claims; ring.cuh loader_lm_dynamic) until the empty
// page; a block with no rows reports (-inf, n_vocab), which loses to every real candidate.
template <bool RING, bool FLAG, bool SAMPLE>
__device__ void op_lm_head(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const bool dynamic = RING && c.p.lm_dynamic;
  // The loader claims this step's units once the consumers are here (ring.cuh s_lm_gate).
  if (dynamic && threadIdx.x == 0) lm_gate_set(c.step + 1);
  residual_in<FLAG>(c, L.n_layer);
  rmsnorm_smem(c, input_norm(c.p, in), L.n_embd, true);
  float* logits = c.p.ws + L.logits;
  // A sampled launch of the flag protocol: the draw reads every logit, so they go out flagged (isa.h).
  constexpr bool flag_logits = FLAG && SAMPLE;
  float best = -INFINITY;
  int best_i = dynamic ? L.n_vocab : INT32_MAX;
  auto out = [&](int r, float v) {
    if constexpr (flag_logits) st_flag(c.p.fws + L.logits + r, v, c.epoch);
    else logits[r] = v;
    if (argmax_better(v, r, best, best_i)) best = v, best_i = r;
  };
  if (dynamic) {
    if (c.p.timing && threadIdx.x == 0 && c.matvec_start == 0) c.matvec_start = global_ns();
    // At most every unit and the empty page (the bound only matters after a watchdog error, when a page wait gives
    // up and the unit read is stale).
    for (int pair_base = 0, n = 0; n <= L.lm_units; ++n) {
      const uint32_t slot = ring_wait_page(c);
      const int unit = *reinterpret_cast<volatile int*>(&s_lm_unit[slot]);
      const int r0 = unit * L.lm_unit_rows, nr = unit < 0 ? 0 : min(L.lm_unit_rows, L.n_vocab - r0);
      ring_page_matvec(c, slot, L.n_embd, nr, r0, pair_base, c.s_x, out);
      if (unit < 0) break;
      pair_base += (nr + 1) / 2;
    }
  } else {
    matvec<RING>(c, in, c.s_x, out);
  }
  if (block_argmax(c, best, best_i)) {
    const int64_t amax = L.amax + 2 * int64_t(in.chunk);
    st_act<FLAG>(c, amax, best);
    st_act<FLAG>(c, amax + 1, float(best_i));
  }
}

// The best of the LM-head slices' (value, index) records; true in thread 0, which holds it.
template <bool FLAG>
__device__ __forceinline__ bool reduce_amax(const Ctx& c, float& best, int& best_i) {
  const Layout& L = c.p.L;
  // Every consumer thread takes slices t, t + NCT, ... (one 16-byte load of the slice's (value, index) pairs,
  // re-polled while stale), then shuffles and the consumer warps' candidates in s_aux: argmax_better is a total order on
  // (value, index), so any reduction order picks the same winner. (Version 9's thread 0 looped over the slices, one
  // L2 round trip each: 30-35 us per step on an H200, on the step's critical path; bench/RESULTS.md v10.)
  // (best, best_i): the caller's start, (-inf, INT32_MAX).
  for (int s = threadIdx.x; s < L.n_lm_slices; s += NCT) {
    float v, fi;
    if constexpr (FLAG) {
      const u64* f = c.p.fws + L.amax + 2 * s;
      ulonglong2 q = ld_flag2(f);
      const long long t0 = clock64();
      for (uint32_t n = 0; !(fresh(q.x, c.epoch) && fresh(q.y, c.epoch)); ++n) {
        if ((n & 63u) == 1u && flag_poll_expired(c.p, c.instr, t0)) break;
        q = ld_flag2(f);
      }
      v = flag_val(q.x), fi = flag_val(q.y);
    } else {
      v = ld_act(c.p.ws + L.amax + 2 * s), fi = ld_act(c.p.ws + L.amax + 2 * s + 1);
    }
    if (argmax_better(v, int(fi), best, best_i)) best = v, best_i = int(fi);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (argmax_better(ov, oi, best, best_i)) best = ov, best_i = oi;
  }
  return block_argmax(c, best, best_i);
}

// Thread 0: tokens[step + 1] = t. Flag protocol: the token goes out as a pair tagged with the next step's epoch (its
// reader's). (With stop ids the interpreter adds put_stop_state after the instruction.)
template <bool FLAG>
__device__ __forceinline__ void put_token(const Ctx& c, int32_t t) {
  c.p.tokens[c.step + 1] = t;
  if constexpr (FLAG) st_flag(c.p.ftokens + c.step + 1, __uint_as_float(uint32_t(t)), c.epoch + 1u);
}

// With stop ids (MkParams::stop), thread 0 after the Argmax instruction (whose thread 0 wrote tokens[step + 1]: its
// own store, read back): the counter instance stores the token as a flagged pair too (tag tag0 + step + 1: the next
// step's stop check reads it, common.cuh step_check), and the call's produced count and a stop go to stop_state (read
// by the host after the launch, and by the call's later launches at their start: the kernel boundary orders them).
// Here rather than in put_token: inside the sampled draw's op it cost that instance registers (H200, 1B: the sampled
// step 1.034 -> 1.049 ms/token with no stop ids).
template <bool FLAG>
__device__ __noinline__ void put_stop_state(const MkParams& p, int step) {
  const int32_t t = *reinterpret_cast<volatile const int32_t*>(p.tokens + step + 1);
  if constexpr (!FLAG) st_flag(p.ftokens + step + 1, __uint_as_float(uint32_t(t)), p.tag0 + uint32_t(step) + 1u);
  p.stop_state[0] = uint32_t(p.produced_base + step + 1);
  if (p.stop.has(t)) p.stop_state[1] = p.launch_seq;
}

// A sampled launch's SamplePartial (isa.h; ops/sample.cuh): m from the LM-head slices' records, then the range's weight
// sum -> sample_part[chunk]. A greedy launch's kernel instances skip the instruction (interpreter.cu).
template <bool FLAG>
__device__ void op_sample_partial(const Ctx& c, const Instr& in) {
  float best = -INFINITY;
  int best_i = INT32_MAX;
  if (reduce_amax<FLAG>(c, best, best_i)) c.s_red[32] = best;
  csync();
  const float m = sample_max<FLAG>(c.p, c.s_red[32], c.s_red, c.epoch, c.instr);
  sample_partial<FLAG>(c.p, in.chunk, int(in.row_begin), int(in.row_end), m, c.s_x, c.epoch, c.instr);
}

// A sampled launch's Argmax (MkParams::sample): tokens[step + 1] drawn by the host Sampler's rule with draw index
// first_draw + step from the ranges' sums (ops/sample.cuh). No finite logit: error code 3 (the launch ends,
// MegakernelBackend::check_error reports it) and token 0 fed on, so nothing reads out of the vocabulary.
template <bool FLAG>
__device__ void op_sample(const Ctx& c) {
  const int32_t t = sample_pick<FLAG>(c.p, c.s_x, c.epoch, c.instr, c.p.sample.first_draw + uint64_t(c.step));
  if (threadIdx.x != 0) return;
  if (t < 0 && atomicCAS(c.p.error, 0u, 3u) == 0u) c.p.error[1] = blockIdx.x, c.p.error[2] = c.instr, c.p.error[3] = c.pos;
  put_token<FLAG>(c, t < 0 ? 0 : t);
}

// tokens[step + 1] = argmax over the slices' candidates (the smaller index on ties), or (the kernel instance of sampled
// launches) the draw.
template <bool FLAG, bool SAMPLE>
__device__ void op_argmax(const Ctx& c, const Instr&) {
  if constexpr (SAMPLE) return op_sample<FLAG>(c);
  float best = -INFINITY;
  int best_i = INT32_MAX;
  if (reduce_amax<FLAG>(c, best, best_i)) put_token<FLAG>(c, best_i);
}

}  // namespace mk::megakernel::device
