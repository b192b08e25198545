// MlpGateUp and MlpDown (isa.h). Mirrors mlp_gate_up / mlp_down in src/megakernel/sim_ops.cpp.
#pragma once
#include "megakernel/device/common.cuh"

namespace mk::megakernel::device {

// x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm); s_aux[2 (r - r0) + {0, 1}] = (gate, up) x for the rows
// r of the instruction (MlpGateUp, MlpGateUpDown).
// Flag protocol with the mid-layer residual (L.mid_resid): two phases. Each instruction first sums and publishes its
// slice of resid_mid[l] (= x), then polls all of resid_mid[l] -- every SM's slice. Before, each SM polled and summed
// the whole of resid and the n_kv_head o_part vectors itself (1B: 147 KB per SM, 3 dependent round trips per thread
// slot, 2 slots for warp 0; 8B: 9): 5.8 us per layer at 1B, 10.8 at 8B (bench/RESULTS.md session 18 call 2).
template <bool RING, bool FLAG>
__device__ void gate_up_rows(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  const MkLayer& w = c.p.layers[in.layer];
  const int64_t E = L.n_embd;
  const int64_t mid = L.resid_mid + in.layer * E;
  const bool two_phase = FLAG && L.mid_resid;
  if (two_phase) {
    slice_sum_flag(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, mid, int(in.aux_begin),
                   int(in.aux_end));
    poll_vector(c, mid, L.n_embd);
  } else if constexpr (FLAG) {
    sum_residual_flag(c, L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, -1);
  } else {
    sum_residual(c, c.p.ws + L.resid + in.layer * E, c.p.ws + L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, nullptr);
  }
  csync();
  stamp(c, T_PREP1);
  // Materialise this instruction's slice of resid_mid[l] (read by the next QkvProj with L.mid_resid).
  if (!two_phase)
    for (int i = int(in.aux_begin) + threadIdx.x; i < int(in.aux_end); i += NCT) st_act<FLAG>(c, mid + i, c.s_x[i]);
  rmsnorm_smem(c, w.mlp_norm, L.n_embd, true);
  stamp(c, T_PREP2);
  // Interleaved rows: 2r = gate r, 2r + 1 = up r; a warp's row pair is exactly (gate, up) of one r.
  const int r0 = int(in.row_begin);
  float* s_gu = c.s_aux;  // [2 (r1 - r0)]
  matvec<RING>(c, in, c.s_x, [&](int r, float v) { s_gu[r - 2 * r0] = v; });
  csync();
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// act[l][rows] = silu(gate x) * up x
template <bool RING, bool FLAG>
__device__ void op_mlp_gate_up(const Ctx& c, const Instr& in) {
  gate_up_rows<RING, FLAG>(c, in);
  const float* s_gu = c.s_aux;
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  const int64_t act = c.p.L.act + int64_t(in.layer) * c.p.L.n_ff;
  for (int r = r0 + threadIdx.x; r < r1; r += NCT) st_act<FLAG>(c, act + r, silu_mul(s_gu[2 * (r - r0)], s_gu[2 * (r - r0) + 1]));
}

// The fused MLP (isa.h MlpGateUpDown; ring and flag protocol only, as the backend schedules it): the rows' act stays
// in shared memory, and their split-K share of the down projection, down[l][part][e] = sum_r w_down[e][r] act[r] over
// the instruction's rows r, streams in as w_down_t rows (ring pages after the gate/up pages: weight_rows part 1).
// Thread t owns the 8-column chunks t and t + NCT of the partial; the rows are added in order (deterministic).
// Why: no dependency point between gate/up and down -- the next layer's two-phase residual_in reduces the partials.
template <bool RING, bool FLAG>
__device__ void op_mlp_gate_up_down(const Ctx& c, const Instr& in) {
  const Layout& L = c.p.L;
  gate_up_rows<RING, FLAG>(c, in);
  const int n = int(in.row_end - in.row_begin);
  float* s_act = c.s_aux + 2 * n;  // [n] (the backend sizes s_aux for 3 n)
  for (int j = threadIdx.x; j < n; j += NCT) s_act[j] = silu_mul(c.s_aux[2 * j], c.s_aux[2 * j + 1]);
  csync();
  const int chunks = L.n_embd / 8, rpp = page_rows(L.n_embd), lane = threadIdx.x & 31;
  float acc[2][8] = {};
  for (int r = 0; r < n; r += rpp) {
    const int nr = min(rpp, n - r);
    const uint32_t slot = ring_wait_page(c);
    const uint4* pg = reinterpret_cast<const uint4*>(c.ring + size_t(slot) * PAGE_BYTES);
    for (int j = 0; j < nr; ++j) {
      const float a = s_act[r + j];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ch = threadIdx.x + h * NCT;
        if (ch >= chunks) continue;
        const uint4 u = pg[j * chunks + ch];
        const uint32_t wv[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[h][2 * q] += a * mk::cuda::bf16_lo(wv[q]);
          acc[h][2 * q + 1] += a * mk::cuda::bf16_hi(wv[q]);
        }
      }
    }
    // Release the page (every warp walks every page: ring.cuh's arrival count).
    __syncwarp();
    if (lane == 0) mbar_arrive(&c.empty[slot]);
    ++c.page;
  }
  const int64_t out = L.down + (int64_t(in.layer) * L.n_down_parts + in.chunk) * L.n_embd;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = threadIdx.x + h * NCT;
    if (ch >= chunks) continue;
#pragma unroll
    for (int q = 0; q < 8; ++q) st_act<FLAG>(c, out + ch * 8 + q, acc[h][q]);
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
