// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); act[rows] = silu(gate x) * up x.
// Version 11, dynamic MlpGateUp (MkParams::gu_dynamic, isa.h Layout::gu): the rows come page by page in the order
// the loader got them (its static units, then its claims; ring.cuh loader_dynamic) until the empty page, and each
// act element is stored by the warp that computed its (gate, up) row pair, right after the pair (the same
// expression as the static path: bit-identical).
template <bool RING, bool FLAG>
__device__ void op_mlp_gate_up(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  const int64_t E = L.n_embd;
  const bool dynamic = RING && FLAG && c.p.gu_dynamic;  // flag instance only (see MkParams::gu_dynamic)
  // The loader claims this layer's units once the consumers are here (ring.cuh s_dyn_gate).
  if (dynamic && threadIdx.x == 0) dyn_gate_set(dyn_gate(L, c.step, 2 * in.layer));
  if constexpr (FLAG) sum_residual_flag(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, -1);
  else sum_residual(c, c.p.ws + L.resid + in.layer * E, c.p.ws + L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, nullptr);
  csync();
  // Materialise this instruction's slice of resid_mid[l] (read by the next QkvProj with L.mid_resid).
  const int64_t mid = L.resid_mid + in.layer * E;
  for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_act<FLAG>(c, mid + i, c.s_x[i]);
  rmsnorm_smem(c, w.mlp_norm, L.n_embd, true);
  // Interleaved rows: 2r = gate r, 2r + 1 = up r; a warp's row pair is exactly (gate, up) of one r.
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)] (static rows)
  float g = 0.f;          // dynamic: lane 0 of the pair's warp gets gate 2r, then up 2r + 1 (ring_page_matvec's order)
  auto out = [&](int r, float v) {
    if (!dynamic) s_gu[r - 2 * r0] = v;
    else if ((r & 1) == 0) g = v;
    else st_act<FLAG>(c, act + (r >> 1), g / (1.f + expf(-g)) * v);
  };
  if constexpr (RING) {
    if (c.p.timing && threadIdx.x == 0 && c.matvec_start == 0) c.matvec_start = global_ns();
    ring_dyn_matvec(c, dynamic, weight_rows(c.p, in), dyn_max_pages(L.gu, L.n_embd, 2), c.s_x, out);
  } else {
    matvec<RING>(c, in, c.s_x, out);
  }
  if (dynamic) return;
  csync();
  for (int r = r0 + threadIdx.x; r < r1; r += NCT) {
    const float gv = s_gu[2 * (r - r0)], u = s_gu[2 * (r - r0) + 1];
    st_act<FLAG>(c, act + r, gv / (1.f + expf(-gv)) * u);
  }
}

// down[l][rows] = w_down[rows] . act[l]
// Version 11, dynamic MlpDown (MkParams::dn_dynamic, isa.h Layout::dn; flag instance only, as MlpGateUp): the rows
// page by page in the order the loader got them (ring.cuh loader_dynamic) until the empty page.
template <bool RING, bool FLAG>
__device__ void op_mlp_down(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const int64_t act = L.act + int64_t(in.layer) * L.n_ff;
  const bool dynamic = RING && FLAG && c.p.dn_dynamic;
  // The loader claims this layer's units once the consumers are here (ring.cuh s_dyn_gate).
  if (dynamic && threadIdx.x == 0) dyn_gate_set(dyn_gate(L, c.step, 2 * in.layer + 1));
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
  const int64_t out = L.down + int64_t(in.layer) * L.n_embd;
  auto store = [&](int r, float v) { st_act<FLAG>(c, out + r, v); };
  if constexpr (RING) {
    if (c.p.timing && threadIdx.x == 0 && c.matvec_start == 0) c.matvec_start = global_ns();
    ring_dyn_matvec(c, dynamic, weight_rows(c.p, in), dyn_max_pages(L.dn, L.n_ff, 1), c.s_x, store);
  } else {
    matvec<RING>(c, in, c.s_x, store);
  }
}

}  // namespace mk::megakernel::device
