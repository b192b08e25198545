// Instantiation of the FA3-style Hopper prefill kernel (prefill_hopper.cuh) for head dim 64: one file per head
// dim keeps each compile small. Two shapes: 3 consumer warpgroups (192-row Q tile, 160 registers each) and 2
// (128-row Q tile, 240 registers); p.n_wg picks one.
#include "cuda/attention/prefill_hopper.cuh"

namespace mk::cuda::attn {
cudaError_t launch_prefill_hopper_d64(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  return p.n_wg == 3 ? launch_prefill_hopper<64, 3>(p, total_q, pool_rows, s)
                     : launch_prefill_hopper<64, 2>(p, total_q, pool_rows, s);
}
cudaError_t prefill_trace_arm_d64(void* buf, size_t bytes) { return prefill_trace_arm_here(buf, bytes); }
}  // namespace mk::cuda::attn
