// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); act[rows] = silu(gate x) * up x.
template <bool RING>
__device__ void op_mlp_gate_up(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  sum_residual(c, c.p.ws + L.resid + int64_t(in.layer) * L.n_embd,
               c.p.ws + L.o_part + int64_t(in.layer) * L.n_kv_head * L.n_embd, nullptr);
  rmsnorm_smem(c, w.mlp_norm, L.n_embd, true);
  // Interleaved rows: 2r = gate r, 2r + 1 = up r; a warp's row pair is exactly (gate, up) of one r.
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)]
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { s_gu[r - 2 * r0] = v; });
  csync();
  float* act = c.p.ws + L.act + int64_t(in.layer) * L.n_ff;
  for (int r = r0 + threadIdx.x; r < r1; r += NCT) {
    const float g = s_gu[2 * (r - r0)], u = s_gu[2 * (r - r0) + 1];
    act[r] = g / (1.f + expf(-g)) * u;
  }
}

// down[l][rows] = w_down[rows] . act[l]
template <bool RING>
__device__ void op_mlp_down(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const float* act = c.p.ws + L.act + int64_t(in.layer) * L.n_ff;
  for (int i = 4 * threadIdx.x; i < L.n_ff; i += 4 * NCT)
    *reinterpret_cast<float4*>(c.s_x + i) = ld_act4(act + i);
  csync();
  float* out = c.p.ws + L.down + int64_t(in.layer) * L.n_embd;
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { out[r] = v; });
}

}  // namespace mk::megakernel::device
