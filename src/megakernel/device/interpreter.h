// Launch of the megakernel interpreter (interpreter.cu). CUDA translation units only.
#pragma once
#include <cuda_runtime.h>

#include "megakernel/device/params.cuh"

namespace mk::megakernel::device {

// Dynamic shared memory the kernel needs for these parameters (barriers + s_x + s_aux + reductions +
// p.n_pages ring pages).
size_t smem_bytes(const MkParams& p);
// The same without ring pages (the backend sizes the ring from what is left).
size_t smem_bytes_without_ring(int smem_x_floats, int smem_aux_floats);

// One cooperative launch of n_sm persistent blocks running p.n_steps steps. Asynchronous.
cudaError_t launch_megakernel(const MkParams& p, int n_sm, cudaStream_t stream);

}  // namespace mk::megakernel::device
