// LmHead and Argmax (isa.h). Mirrors lm_head / argmax in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// Final residual; rmsnorm(final_norm); logits[rows]; the slice's argmax -> amax[slice].
template <bool RING, bool FLAG>
__device__ void op_lm_head(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  residual_in<FLAG>(c, L.n_layer);
  rmsnorm_smem(c, c.p.final_norm, L.n_embd, true);
  float* logits = c.p.ws + L.logits;
  float best = -INFINITY;
  int best_i = INT32_MAX;
  matvec<RING>(c, in, c.s_x, [&](int r, float v) {
    logits[r] = v;
    if (argmax_better(v, r, best, best_i)) best = v, best_i = r;
  });
  // Per-warp candidates (lane 0 holds them) -> thread 0.
  float* s_val = c.s_aux;
  int* s_idx = reinterpret_cast<int*>(c.s_aux + WARPS);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s_val[warp] = best, s_idx[warp] = best_i;
  csync();
  if (threadIdx.x == 0) {
    for (int k = 1; k < int(WARPS); ++k)
      if (argmax_better(s_val[k], s_idx[k], best, best_i)) best = s_val[k], best_i = s_idx[k];
    const int64_t amax = L.amax + 2 * int64_t(in.chunk);
    st_act<FLAG>(c, amax, best);
    st_act<FLAG>(c, amax + 1, float(best_i));
  }
}

// tokens[step + 1] = argmax over the slices' candidates (first index on ties). Flag protocol: all consumer
// threads poll amax first; the token goes out as a pair tagged with the next step's epoch (its reader's).
template <bool FLAG>
__device__ void op_argmax(const Ctx& c, const Instr&) {
  const Layout& L = c.p.L;
  if constexpr (FLAG) poll_region(c, c.p.fws + L.amax, 2 * L.n_lm_slices);
  if (threadIdx.x != 0) return;
  auto val = [&](int k) { return FLAG ? ld_flag_val(c.p.fws + L.amax + k) : ld_act(c.p.ws + L.amax + k); };
  float best = val(0);
  int best_i = int(val(1));
  for (int s = 1; s < L.n_lm_slices; ++s) {
    const float v = val(2 * s);
    const int i = int(val(2 * s + 1));
    if (argmax_better(v, i, best, best_i)) best = v, best_i = i;
  }
  c.p.tokens[c.step + 1] = best_i;
  if constexpr (FLAG) st_flag(c.p.ftokens + c.step + 1, __uint_as_float(uint32_t(best_i)), c.epoch + 1u);
}

}  // namespace mk::megakernel::device
