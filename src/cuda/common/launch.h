// Kernel launches with programmatic dependent launch (PDL). A kernel launched this way may start while the
// previous kernel in the stream is still running; it must call pdl_wait() (griddepcontrol.wait) before it
// reads anything the previous kernels wrote, and may do independent work (weight loads) before that.
// Every kernel of ours calls pdl_wait() unconditionally, so "kernel N finished" implies "all kernels before N
// finished" (the waits chain), which is what makes reading outputs of kernel N-2 safe.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {

// Where and how ops launch: the stream, and whether to allow PDL overlap with the previous kernel.
struct Stream {
  cudaStream_t stream = nullptr;
  bool pdl = true;
  Stream() = default;
  Stream(cudaStream_t s, bool p = true) : stream(s), pdl(p) {}
};

template <class... KArgs, class... Args>
void launch(const Stream& s, dim3 grid, dim3 block, size_t smem, void (*kernel)(KArgs...), Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = s.pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace mk::cuda
