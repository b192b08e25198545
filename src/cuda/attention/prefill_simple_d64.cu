// Instantiation of the FA2-style prefill kernel (prefill_simple.cuh) for head dim 64: one file per head dim
// keeps each compile small.
#include "cuda/attention/prefill_simple.cuh"

namespace mk::cuda::attn {
cudaError_t launch_prefill_simple_d64(const PrefillParams& p, cudaStream_t s) { return launch_prefill_simple<64>(p, s); }
}  // namespace mk::cuda::attn
