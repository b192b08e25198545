// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp.
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

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); act[rows] = silu(gate x) * up x.
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
  if constexpr (FLAG) {
    poll_vector(c, act, L.n_ff);
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
