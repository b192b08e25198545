#include <cuda_runtime.h>

#include "cuda/device_info.h"

namespace mk::cuda {

Expected<DeviceInfo> query_device(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return make_error("no CUDA GPU is available (", err == cudaSuccess ? "no devices" : cudaGetErrorString(err),
                      "); use --device cpu");
  if (index < 0 || index >= count) return make_error("GPU index ", index, " is out of range: ", count, " present");
  cudaDeviceProp p{};
  if ((err = cudaGetDeviceProperties(&p, index)) != cudaSuccess)
    return make_error("cannot read GPU ", index, " properties: ", cudaGetErrorString(err));
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.total_memory = p.totalGlobalMem;
  d.smem_per_block_optin = p.sharedMemPerBlockOptin;
  d.l2_bytes = p.l2CacheSize;
  if (p.major != 9 || p.minor != 0)
    return make_error("GPU '", p.name, "' has compute capability ", p.major, ".", p.minor,
                      "; this build has kernels for sm_90a (H100/H200) only; use --device cpu");
  if ((err = cudaSetDevice(index)) != cudaSuccess)
    return make_error("cannot use GPU ", index, ": ", cudaGetErrorString(err));
  size_t free_b = 0, total_b = 0;
  if ((err = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
    return make_error("cannot query GPU memory: ", cudaGetErrorString(err));
  d.free_memory = free_b;
  return d;
}

}  // namespace mk::cuda
