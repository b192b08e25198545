// Read-bandwidth ceiling; see read_ceiling.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/attention/read_ceiling.h"

namespace mk::cuda {
namespace {

__device__ __forceinline__ uint4 ld_nc(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Grid-stride over n 16-byte vectors, U independent loads in flight per thread; the XOR keeps them live.
template <int U>
__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld_nc(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = ld_nc(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: only defeats dead-code elimination
}

}  // namespace

Expected<double> measure_read_tbps(size_t bytes, int repeats) {
  bytes = bytes / 16 * 16;
  void* buf = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 16) != cudaSuccess) {
    cudaFree(buf);
    cudaGetLastError();
    return make_error("measure_read_tbps: cannot allocate ", bytes, " bytes");
  }
  cudaMemset(buf, 0x5a, bytes);
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  double best = 0;
  for (int shape = 0; shape < 2; ++shape) {
    std::vector<float> ts;
    for (int r = 0; r < repeats + 2; ++r) {
      cudaEventRecord(a);
      if (shape == 0) read_kernel<4><<<sms * 4, 512>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
      else read_kernel<8><<<sms * 8, 256>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (r >= 2) ts.push_back(ms);  // two warm-ups
    }
    std::sort(ts.begin(), ts.end());
    best = std::max(best, double(bytes) / (ts[ts.size() / 2] * 1e-3) / 1e12);
  }
  const cudaError_t e = cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  if (e != cudaSuccess) return make_error("measure_read_tbps: ", cudaGetErrorString(e));
  return best;
}

}  // namespace mk::cuda
