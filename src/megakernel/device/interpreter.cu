// The megakernel interpreter: one persistent block per SM walks its queue of instructions (isa.h)
// for n_steps decode steps, waiting on and signalling the monotonic epoch counters exactly as the
// simulator (sim.cpp) does. All SMs must be resident at once: the launch is cooperative, so the
// driver refuses a grid that cannot be co-resident instead of letting it deadlock.
//
// Version 2 (this file; bench/RESULTS.md has each version's figures): every warp of the block computes
// each instruction in turn (no warp roles yet); weights stream with 64 KB of 16-byte loads in flight
// per SM (common.cuh matvec_rows); publishing is barrier + fence + atomic increment; waiting is thread
// 0 polling with ld.acquire. An L2 prefetch of the next instruction's weights before the wait is
// available (MkParams::prefetch_bytes, off by default: measured no gain); register run-ahead was
// tried in commit cadce26 and measured slower (register spills), so it is not here.
#include "megakernel/device/interpreter.h"
#include "megakernel/device/ops/attention.cuh"
#include "megakernel/device/ops/lm_head.cuh"
#include "megakernel/device/ops/mlp.cuh"
#include "megakernel/device/ops/qkv_proj.cuh"

namespace mk::megakernel::device {

// The contiguous weight rows an instruction streams first (null when none: attention, argmax).
__device__ __forceinline__ const bf16* first_weights(const MkParams& p, const Instr& in, int64_t& bytes) {
  const Layout& L = p.L;
  const MkLayer& w = p.layers[in.layer];
  const int64_t rows = int64_t(in.row_end) - in.row_begin;
  switch (in.op) {
    case Op::QkvProj: bytes = rows * L.n_embd * 2; return w.wqkv + int64_t(in.row_begin) * L.n_embd;
    case Op::MlpGateUp: bytes = 2 * rows * L.n_embd * 2; return w.w_gate_up + 2 * int64_t(in.row_begin) * L.n_embd;
    case Op::MlpDown: bytes = rows * L.n_ff * 2; return w.w_down + int64_t(in.row_begin) * L.n_ff;
    case Op::LmHead: bytes = rows * L.n_embd * 2; return p.lm_head + int64_t(in.row_begin) * L.n_embd;
    default: bytes = 0; return nullptr;
  }
}

// Right after publishing (before waiting on the next dependency), pull the start of the next
// instruction's weights towards the SM: the wait's bubble is then spent on weight traffic, and the
// loads after the wait hit L2. Weights never depend on activations, so this is always safe.
__device__ __forceinline__ void prefetch_next(const MkParams& p, const Instr& next) {
  if (p.prefetch_bytes <= 0) return;
  int64_t bytes = 0;
  const bf16* w = first_weights(p, next, bytes);
  if (!w) return;
  bytes = min(bytes, int64_t(p.prefetch_bytes));
  constexpr int PIECE = 16384;
  for (int64_t off = int64_t(threadIdx.x) * PIECE; off < bytes; off += int64_t(blockDim.x) * PIECE) {
    const unsigned n = unsigned(min(int64_t(PIECE), bytes - off)) & ~15u;
    if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<const char*>(w) + off), "r"(n) : "memory");
  }
}

__global__ void __launch_bounds__(THREADS, 1) megakernel_kernel(const __grid_constant__ MkParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const uint32_t begin = p.queue_begin[blockIdx.x], end = p.queue_begin[blockIdx.x + 1];
  for (int step = 0; step < p.n_steps; ++step) {
    const Ctx c{p, smem, smem + p.smem_x_floats, smem + p.smem_x_floats + p.smem_aux_floats, step, p.pos0 + step};
    const uint32_t epoch = p.epoch0 + uint32_t(step);
    for (uint32_t i = begin; i < end; ++i) {
      const Instr in = p.instrs[i];
      if (!wait_deps(p, in, epoch, i)) return;  // watchdog: p.error says where
      switch (in.op) {
        case Op::QkvProj: op_qkv_proj(c, in); break;
        case Op::AttnPartial: op_attn_partial(c, in); break;
        case Op::AttnOProj: op_attn_o_proj(c, in); break;
        case Op::MlpGateUp: op_mlp_gate_up(c, in); break;
        case Op::MlpDown: op_mlp_down(c, in); break;
        case Op::LmHead: op_lm_head(c, in); break;
        case Op::Argmax: op_argmax(c, in); break;
        default: break;
      }
      signal(p, in.signal);
      if (i + 1 < end) prefetch_next(p, p.instrs[i + 1]);
      else if (step + 1 < p.n_steps) prefetch_next(p, p.instrs[begin]);
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
