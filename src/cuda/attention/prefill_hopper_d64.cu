// Instantiation of the FA3-style Hopper prefill kernel (prefill_hopper.cuh) for head dim 64: one file per head
// dim keeps each compile small.
#include "cuda/attention/prefill_hopper.cuh"

namespace mk::cuda::attn {
cudaError_t launch_prefill_hopper_d64(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s) {
  return launch_prefill_hopper<64>(p, total_q, pool_rows, s);
}
}  // namespace mk::cuda::attn
