// The megakernel interpreter: one persistent block per SM walks its queue of instructions (isa.h)
// for n_steps decode steps, waiting on and signalling the monotonic epoch counters exactly as the
// simulator (sim.cpp) does. All SMs must be resident at once: the launch is cooperative, so the
// driver refuses a grid that cannot be co-resident instead of letting it deadlock.
//
// Version 3 (this file): every warp of the block computes each instruction in turn (no warp roles
// yet); weights stream with 64 KB of 16-byte loads in flight per SM (common.cuh matvec_rows), and the
// next instruction's first 64 KB is issued into registers right after publishing, before its wait
// (register run-ahead); publishing is barrier + fence + atomic increment; waiting is thread 0
// polling with ld.acquire.
#include "megakernel/device/interpreter.h"
#include "megakernel/device/ops/attention.cuh"
#include "megakernel/device/ops/lm_head.cuh"
#include "megakernel/device/ops/mlp.cuh"
#include "megakernel/device/ops/qkv_proj.cuh"

namespace mk::megakernel::device {

// The first matrix an instruction streams, as matvec_rows arguments (W null: none, e.g. attention).
struct MatArgs {
  const bf16* W = nullptr;
  int64_t ld = 0;
  int cols = 0, r0 = 0, r1 = 0;
};
__device__ __forceinline__ MatArgs first_matrix(const MkParams& p, const Instr& in) {
  const Layout& L = p.L;
  const MkLayer& w = p.layers[in.layer];
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  switch (in.op) {
    case Op::QkvProj: return {w.wqkv, L.n_embd, L.n_embd, r0, r1};
    case Op::MlpGateUp: return {w.w_gate_up, L.n_embd, L.n_embd, 2 * r0, 2 * r1};
    case Op::MlpDown: return {w.w_down, L.n_ff, L.n_ff, r0, r1};
    case Op::LmHead: return {p.lm_head, L.n_embd, L.n_embd, r0, r1};
    default: return {};
  }
}

// Right after publishing (before waiting on the next dependency): register run-ahead of the next
// instruction's first weight batch (p.run_ahead), and/or an L2 prefetch of its first prefetch_bytes.
__device__ __forceinline__ void prepare_next(const MkParams& p, const Instr& next, RunAhead& ra) {
  const MatArgs m = first_matrix(p, next);
  ra.valid = 0;
  if (!m.W) return;
  if (p.run_ahead) run_ahead(m.W, m.ld, m.cols, m.r0, m.r1, ra);
  if (p.prefetch_bytes <= 0) return;
  const int64_t bytes = min(int64_t(m.r1 - m.r0) * m.ld * 2, int64_t(p.prefetch_bytes));
  const char* base = reinterpret_cast<const char*>(m.W + int64_t(m.r0) * m.ld);
  constexpr int PIECE = 16384;
  for (int64_t off = int64_t(threadIdx.x) * PIECE; off < bytes; off += int64_t(blockDim.x) * PIECE) {
    const unsigned n = unsigned(min(int64_t(PIECE), bytes - off)) & ~15u;
    if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
  }
}

__global__ void __launch_bounds__(THREADS, 1) megakernel_kernel(const __grid_constant__ MkParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const uint32_t begin = p.queue_begin[blockIdx.x], end = p.queue_begin[blockIdx.x + 1];
  RunAhead ra;
  if (begin < end) prepare_next(p, p.instrs[begin], ra);
  for (int step = 0; step < p.n_steps; ++step) {
    const Ctx c{p, smem, smem + p.smem_x_floats, smem + p.smem_x_floats + p.smem_aux_floats, step, p.pos0 + step};
    const uint32_t epoch = p.epoch0 + uint32_t(step);
    for (uint32_t i = begin; i < end; ++i) {
      const Instr in = p.instrs[i];
      if (!wait_deps(p, in, epoch, i)) return;  // watchdog: p.error says where
      switch (in.op) {
        case Op::QkvProj: op_qkv_proj(c, in, ra); break;
        case Op::AttnPartial: op_attn_partial(c, in); break;
        case Op::AttnOProj: op_attn_o_proj(c, in); break;
        case Op::MlpGateUp: op_mlp_gate_up(c, in, ra); break;
        case Op::MlpDown: op_mlp_down(c, in, ra); break;
        case Op::LmHead: op_lm_head(c, in, ra); break;
        case Op::Argmax: op_argmax(c, in); break;
        default: break;
      }
      signal(p, in.signal);
      if (i + 1 < end) prepare_next(p, p.instrs[i + 1], ra);
      else if (step + 1 < p.n_steps) prepare_next(p, p.instrs[begin], ra);
    }
  }
}

size_t smem_bytes(const MkParams& p) { return size_t(p.smem_x_floats + p.smem_aux_floats + 64) * sizeof(float); }

cudaError_t launch_megakernel(const MkParams& p, int n_sm, cudaStream_t stream) {
  const size_t smem = smem_bytes(p);
  cudaError_t e = cudaFuncSetAttribute(megakernel_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  void* args[] = {const_cast<MkParams*>(&p)};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(megakernel_kernel), dim3(n_sm), dim3(THREADS), args,
                                     smem, stream);
}

}  // namespace mk::megakernel::device
