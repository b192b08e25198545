// The SM count of the current GPU, asked once per process: the launchers that size their grids to the GPU (matvecs,
// decode attention's split choice, the sampling blocks' limit, the probes) all read it here. The engine drives one
// GPU per process. 1 when no GPU answers: grids stay correct, only narrow (and any launch then reports the error).
#pragma once
#include <cuda_runtime.h>

namespace mk::cuda {

inline int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return v > 0 ? v : 1;
  }();
  return n;
}

}  // namespace mk::cuda
