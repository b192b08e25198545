// Device-side pseudo-random fill for attention tests and benchmarks (gigabyte inputs in milliseconds; a host
// RNG would dominate a benchmark round). Values ~ N(0, sigma^2) by Box-Muller over a counter hash.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention/attention.h"

namespace mk::cuda {

Status fill_random_bf16(cudaStream_t stream, bf16* data, size_t n, uint64_t seed, float sigma);

}  // namespace mk::cuda
