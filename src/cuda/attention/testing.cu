// Device-side random fill for tests and benchmarks; see testing.h.
#include "cuda/attention/testing.h"

namespace mk::cuda {
namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return uint32_t((x ^ (x >> 31)) >> 32);
}

__global__ void fill_kernel(bf16* data, size_t n, uint64_t seed, float sigma) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u1 = (mix(seed * 0x100000001b3ull + 2 * i) + 1.f) * 2.3283064e-10f;  // (0, 1]
    const float u2 = mix(seed * 0x100000001b3ull + 2 * i + 1) * 2.3283064e-10f;
    data[i] = __float2bfloat16(sigma * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

}  // namespace

Status fill_random_bf16(cudaStream_t stream, bf16* data, size_t n, uint64_t seed, float sigma) {
  if (n == 0) return {};
  const int blocks = int(std::min<size_t>((n + 255) / 256, 132 * 16));
  fill_kernel<<<blocks, 256, 0, stream>>>(data, n, seed, sigma);
  if (cudaGetLastError() != cudaSuccess) return make_error("fill_random_bf16: launch failed");
  return {};
}

}  // namespace mk::cuda
