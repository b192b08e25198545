// Instantiation of the FA2-style prefill kernel (prefill_simple.cuh) for head dim 128: one file per head dim
// keeps each compile small.
#include "cuda/attention/prefill_simple.cuh"

namespace mk::cuda::attn {
cudaError_t launch_prefill_simple_d128(const PrefillParams& p, cudaStream_t s) { return launch_prefill_simple<128>(p, s); }
}  // namespace mk::cuda::attn
