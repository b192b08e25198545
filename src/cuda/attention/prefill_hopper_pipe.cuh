// Synchronisation primitives of the FA3-style Hopper prefill kernel (sm_90a; mbarriers and TMA come from
// cuda/common/mbarrier.cuh): named barriers for the consumer warpgroups' ping-pong, register
// reconfiguration (setmaxnreg), an operand pin for async wgmma, and the epilogue's stmatrix and TMA store. Used by
// prefill_hopper.cuh only.
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
using mk::cuda::smem_u32;
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
// Four 8x8 bf16 matrices from registers (mma accumulator fragment layout) to shared memory: lanes 8i..8i+7 give the
// row addresses of matrix i, register i holds this thread's pair of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// 3-D TMA tile store from shared memory (coordinates innermost first), committed as a bulk group.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until the committed bulk stores have read their shared memory (the CTA may exit after it).
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

}  // namespace mk::cuda::attn
