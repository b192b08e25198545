// QkvProj (isa.h): residual reduction + RMSNorm + rows of the fused [q | k | v] projection (+ bias).
// Mirrors qkv_proj in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

template <bool RING, bool FLAG, bool STOP = false>
__device__ void op_qkv_proj(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  residual_in<FLAG, STOP>(c, in.layer);
  csync();
  stamp(c, T_PREP1);
  gate_open(c.p, c.step, c.instr);  // the whole input is read: the loader may stream the rest (ring.cuh s_gate)
  // Materialise this instruction's slice of resid[l] (the residual reduction is then done once); flags + mid_resid:
  // its contribution to resid_mid[l]'s accumulator instead (isa.h mid_acc_word), which is resid[l]'s only reader then.
  const int64_t resid = L.resid + int64_t(in.layer) * L.n_embd;
  if (FLAG && L.mid_resid) {
    u64* const acc = mid_acc_words(c, in.layer, c.epoch);
    for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) red_acc(acc + i, c.s_x[i]);
  } else {
    for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_act<FLAG>(c, resid + i, c.s_x[i]);
  }
  rmsnorm_smem(c, w.attn_norm, L.n_embd, true);
  stamp(c, T_PREP2);
  const int64_t out = L.qkv + int64_t(in.layer) * L.qkv_dim;
  const float* bias = w.bqkv;
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { st_act<FLAG>(c, out + r, bias ? v + bias[r] : v); });
}

}  // namespace mk::megakernel::device
