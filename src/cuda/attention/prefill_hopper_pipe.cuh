// Synchronisation primitives of the FA3-style Hopper prefill kernel (sm_90a; mbarriers and TMA come from
// cuda/common/mbarrier.cuh): named barriers for the consumer warpgroups' ping-pong, register
// reconfiguration (setmaxnreg) and an operand pin for async wgmma. Used by prefill_hopper.cuh only.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/attention/attn_common.cuh"

namespace mk::cuda::attn {

using mk::cuda::fence_proxy_async;
using mk::cuda::mbar_arrive;
using mk::cuda::mbar_arrive_expect_tx;
using mk::cuda::mbar_init;
using mk::cuda::mbar_wait;
using mk::cuda::tma_load_3d;

// Named barriers 1..15 (0 is __syncthreads). bar.sync waits until `n` threads (whole warps) have arrived or
// synced on `id`; bar.arrive counts this warp in without waiting.
__device__ __forceinline__ void named_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Pins accumulator registers at this point (the compiler must not move them across an async wgmma's
// issue / wait window).
template <int N>
__device__ __forceinline__ void fence_operands(float (&x)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(x[j][e])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&x)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(x[j][e])::"memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

}  // namespace mk::cuda::attn
