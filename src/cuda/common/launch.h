// Kernel launches with programmatic dependent launch (PDL). A kernel launched this way may start while the
// previous kernel in the stream is still running; it must call pdl_wait() (griddepcontrol.wait) before it
// reads anything the previous kernels wrote, and may do independent work (weight loads) before that.
// Every kernel of ours calls pdl_wait() unconditionally, so "kernel N finished" implies "all kernels before N
// finished" (the waits chain), which is what makes reading outputs of kernel N-2 safe.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <mutex>
#include <unordered_set>
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

// Measurement knob MK_SMEM_CARVEOUT=<percent>: each kernel launched through launch() (and the matvec and decode
// attention launchers) gets that cudaFuncAttributePreferredSharedMemoryCarveout before its first launch, to put the
// decode chain's kernels under one shared-memory carveout: an SM runs kernels of different carveouts only one after
// the other, with no PDL overlap (a decode attention that needed the 228 KB carveout cost the step 10%,
// bench/RESULTS.md session 8). Unset: the driver's choice, as always so far.
inline void apply_carveout(const void* kernel) {
  static const int pct = [] {
    const char* e = std::getenv("MK_SMEM_CARVEOUT");
    return e && *e ? std::atoi(e) : -1;
  }();
  if (pct < 0) return;
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard lock(mu);
  if (done.insert(kernel).second)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pct));
}

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
  apply_carveout(reinterpret_cast<const void*>(kernel));
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace mk::cuda
