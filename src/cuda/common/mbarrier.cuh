// Shared-memory mbarriers and the bulk / TMA copies that complete on them (sm_90a), for every kernel that
// streams through a shared-memory ring: the Hopper prefill and decode attention (cuda/attention) and the
// megakernel's weight ring. CCCL's cuda::ptx where it has the exact form; inline PTX only for the forms it
// lacks: arrivals that discard the state (its shared::cta arrivals return it) and the L2 cache-hinted bulk copy.
#pragma once
#include <cuda.h>

#include <cuda/ptx>

#include <cstdint>

namespace mk::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) { ::cuda::ptx::mbarrier_init(bar, count); }

// One arrival that also adds `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// try_wait may suspend the thread for a while before it fails; test_wait only probes.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  return ::cuda::ptx::mbarrier_try_wait_parity(bar, parity);
}
__device__ __forceinline__ bool mbar_test_wait(uint64_t* bar, uint32_t parity) {
  return ::cuda::ptx::mbarrier_test_wait_parity(bar, parity);
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Makes this thread's generic-proxy writes to shared memory (e.g. mbarrier.init) visible to the async proxy.
__device__ __forceinline__ void fence_proxy_async() { ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared); }

// 1-D bulk copy global -> shared completing `bytes` on `bar`, with an L2 cache policy (e.g. evict-first for
// weights that are read once per step). bytes: multiple of 16; src and dst 16-byte aligned.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// 3-D TMA tile load (coordinates innermost first) completing on `bar`.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  const int32_t coords[3] = {c0, c1, c2};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
}

}  // namespace mk::cuda
