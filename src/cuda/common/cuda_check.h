// Error checks for CUDA calls. CUDA_CHECK aborts with the expression, file and line (programmer errors and
// failures that leave the device unusable); cuda_status() turns a failed call into a Status for errors a user
// can act on (out of memory, no device).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "core/status.h"

#define CUDA_CHECK(expr)                                                                               \
  do {                                                                                                 \
    cudaError_t mk_cuda_err_ = (expr);                                                                 \
    if (mk_cuda_err_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: CUDA error '%s' in %s\n", __FILE__, __LINE__,                       \
                   cudaGetErrorString(mk_cuda_err_), #expr);                                           \
      std::abort();                                                                                    \
    }                                                                                                  \
  } while (0)

// Checks the last launch (configuration errors show up here, not at the launch statement).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace mk::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  cudaGetLastError();  // clear a sticky-free error so later calls are not confused by it
  return make_error(what, ": ", cudaGetErrorString(err));
}

}  // namespace mk::cuda
