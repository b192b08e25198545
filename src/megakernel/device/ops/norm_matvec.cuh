// QkvProj and MlpGateUp (isa.h), one code path: an input vector into s_x, this instruction's slice of it stored,
// RMSNorm, then the instruction's rows of the fused projection -- [q | k | v] (+ bias) for QkvProj; interleaved gate /
// up rows and act = silu(gate) * up for MlpGateUp. Mirrors qkv_proj and mlp_gate_up in src/megakernel/sim_ops.cpp
// (act rounded to bf16 here, as the layered path's decode does; the simulator keeps fp32).
// Why one path (session 27): the kernel's per-layer code is fetched again every layer, and instruction-cache misses
// were ~4.5% of the greedy flag instance's stall samples (1.6% more time with 1.9 points more of them, bench/RESULTS.md
// session 27 call 5); with the two ops in one inlined body their RMSNorm and page loop are one copy, not two.
#pragma once
#include "megakernel/device/ops/mlp.cuh"

namespace mk::megakernel::device {

template <bool RING, bool FLAG, bool STOP = false>
__device__ void op_norm_matvec(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  const bool qkv = in.op == Op::QkvProj;
  const int64_t E = L.n_embd;
  // The input: QkvProj's residual stream (the embedding at layer 0); MlpGateUp's x = resid[l] + sum_g o_part[l][g] --
  // with flags and the mid-layer residual resid_mid[l]'s accumulator, complete once all 1 + n_kv_head contributors
  // added to it (isa.h mid_acc_word): one dependency point after the last O-projection partial. (Sessions 18-24
  // summed the partials here in two phases, 2.4 us per layer at 1B; before session 18 every SM summed all of them.)
  if (qkv) {
    residual_in<FLAG, STOP>(c, in.layer);
  } else if (FLAG && L.mid_resid) {
    poll_acc(c, mid_acc_words(c, in.layer, c.epoch), L.n_embd, 1u + uint32_t(L.n_kv_head));
    // The other set's words of this slice, zero for the next step's contributions (isa.h says why this is ordered).
    u64* const next = mid_acc_words(c, in.layer, c.epoch + 1u);
    for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_zero(next + i);
  } else {
    const int64_t resid = L.resid + in.layer * E, parts = L.o_part + in.layer * L.n_kv_head * E;
    if constexpr (FLAG) sum_residual_flag(c, resid, parts, L.n_kv_head, -1);
    else sum_residual(c, c.p.ws + resid, c.p.ws + parts, L.n_kv_head, nullptr);
  }
  csync();
  stamp(c, T_PREP1);
  gate_open(c.p, c.step, c.instr);  // the whole input is read: the loader may stream the rest (ring.cuh gated_op)
  // This instruction's slice of the input, materialised once: QkvProj's resid[l] -- with flags + mid_resid its
  // contribution to resid_mid[l]'s accumulator instead (resid[l]'s only reader then) --, MlpGateUp's resid_mid[l]
  // (read by the next QkvProj with L.mid_resid).
  const int a0 = int(in.aux_begin), a1 = int(in.aux_end);
  if (qkv && FLAG && L.mid_resid) {
    u64* const acc = mid_acc_words(c, in.layer, c.epoch);
    for (int i = a0 + threadIdx.x; i < a1; i += NCT) red_acc(acc + i, c.s_x[i]);
  } else {
    const int64_t slice = (qkv ? L.resid : L.resid_mid) + in.layer * E;
    for (int i = a0 + threadIdx.x; i < a1; i += NCT) st_act<FLAG>(c, slice + i, c.s_x[i]);
  }
  rmsnorm_smem(c, input_norm(c.p, in), L.n_embd, true);
  stamp(c, T_PREP2);
  // QkvProj's rows go out as computed; MlpGateUp's (2r = gate r, 2r + 1 = up r: a warp's row pair is exactly one r's
  // gate and up) wait in s_gu for the SwiGLU.
  const int64_t qkv_out = L.qkv + int64_t(in.layer) * L.qkv_dim;
  const float* bias = qkv ? w.bqkv : nullptr;
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)]
  matvec<RING>(c, in, c.s_x, [&](int r, float v) {
    if (qkv) st_act<FLAG>(c, qkv_out + r, bias ? v + bias[r] : v);
    else s_gu[r - 2 * r0] = v;
  });
  if (qkv) return;
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

}  // namespace mk::megakernel::device
