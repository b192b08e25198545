// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); act[rows] = silu(gate x) * up x.
template <bool RING, bool FLAG>
__device__ void op_mlp_gate_up(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  const int64_t E = L.n_embd;
  if constexpr (FLAG) sum_residual_flag(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, -1);
  else sum_residual(c, c.p.ws + L.resid + in.layer * E, c.p.ws + L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, nullptr);
  csync();
  stamp(c, T_PREP1);
  // Materialise this instruction's slice of resid_mid[l] (read by the next QkvProj with L.mid_resid).
  const int64_t mid = L.resid_mid + in.layer * E;
  for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_act<FLAG>(c, mid + i, c.s_x[i]);
  rmsnorm_smem(c, w.mlp_norm, L.n_embd, true);
  stamp(c, T_PREP2);
  // Interleaved rows: 2r = gate r, 2r + 1 = up r; a warp's row pair is exactly (gate, up) of one r.
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)]
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { s_gu[r - 2 * r0] = v; });
  csync();
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  for (int r = r0 + threadIdx.x; r < r1; r += NCT) {
    const float g = s_gu[2 * (r - r0)], u = s_gu[2 * (r - r0) + 1];
    st_act<FLAG>(c, act + r, g / (1.f + expf(-g)) * u);
  }
}

// down[l][rows] = w_down[rows] . act[l]
template <bool RING, bool FLAG>
__device__ void op_mlp_down(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  if constexpr (FLAG) {  // 4 elements x 4 slots per thread in flight, then re-poll the stale ones
    const u64* f = c.p.fws + act;
    for (int i0 = 4 * threadIdx.x; i0 < L.n_ff; i0 += 16 * NCT) {
      Pairs4 q[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (i0 + k * 4 * NCT < L.n_ff) q[k] = ld_pairs4(f + i0 + k * 4 * NCT);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = i0 + k * 4 * NCT;
        if (i < L.n_ff) {
          repoll4(c, q[k], f + i);
          *reinterpret_cast<float4*>(c.s_x + i) = val4(q[k]);
        }
      }
    }
  } else {
    for (int i = 4 * threadIdx.x; i < L.n_ff; i += 4 * NCT)
      *reinterpret_cast<float4*>(c.s_x + i) = ld_act4(c.p.ws + act + i);
  }
  csync();
  gate_open(c.p, c.step, c.instr);  // the whole input is read: the loader may stream the rest (ring.cuh s_gate)
  const int64_t out = L.down + int64_t(in.layer) * L.n_embd;
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { st_act<FLAG>(c, out + r, v); });
}

}  // namespace mk::megakernel::device
