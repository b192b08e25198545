// Launch of the megakernel interpreter (interpreter.cu). CUDA translation units only.
#pragma once
#include <cuda_runtime.h>

#include "megakernel/device/params.cuh"

namespace mk::megakernel::device {

// Dynamic shared memory the kernel needs for these parameters (s_x + s_aux + reductions).
size_t smem_bytes(const MkParams& p);

// One cooperative launch of n_sm persistent blocks running p.n_steps steps. Asynchronous.
cudaError_t launch_megakernel(const MkParams& p, int n_sm, cudaStream_t stream);

}  // namespace mk::megakernel::device
