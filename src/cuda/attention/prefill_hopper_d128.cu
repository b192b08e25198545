// Instantiation of the FA3-style Hopper prefill kernel (prefill_hopper.cuh) for head dim 128: one file per head
// dim keeps each compile small. 2 consumer warpgroups (128-row Q tile, 240 registers each: O and S alone take
// 128 fp32 registers per thread, so 3 warpgroups at 160 registers would not fit).
#include "cuda/attention/prefill_hopper.cuh"

namespace mk::cuda::attn {
cudaError_t launch_prefill_hopper_d128(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  return launch_prefill_hopper<128, 2>(p, total_q, pool_rows, s);
}
cudaError_t prefill_trace_arm_d128(void* buf, size_t bytes) { return prefill_trace_arm_here(buf, bytes); }
}  // namespace mk::cuda::attn
