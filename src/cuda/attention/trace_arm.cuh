// The trace builds' record buffers (decode.cu with MK_DECODE_TRACE, prefill_hopper.cuh with MK_PREFILL_TRACE): a
// kernel file's device symbols for the buffer pointer and its capacity in 64-byte records.
#pragma once
#include <cuda_runtime.h>

namespace mk::cuda::attn {

template <class Ptr, class Cap>
cudaError_t arm_trace_symbols(const Ptr& ptr_symbol, const Cap& cap_symbol, void* buf, size_t bytes) {
  unsigned long long* ptr = static_cast<unsigned long long*>(buf);
  const unsigned cap = unsigned(bytes / 64);
  cudaError_t e = cudaMemcpyToSymbol(ptr_symbol, &ptr, sizeof(ptr));
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(cap_symbol, &cap, sizeof(cap));
  return e;
}

}  // namespace mk::cuda::attn
