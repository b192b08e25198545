// Device helpers shared by the layered kernels: PDL controls, 16-byte weight loads that bypass L1,
// bf16x8 unpacking, warp and block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

namespace mk::cuda {

using bf16 = __nv_bfloat16;

// Waits until the previous kernel in the stream has finished and its writes are visible (no-op without PDL).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next kernel in the stream start launching its blocks (its pdl_wait still waits for us).
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// 16-byte read-only load of streamed data (weights): not kept in L1, read once per step. No L2 prefetch-size hint:
// on the H200 `.L2::256B` cost the layered decode step 2% (1B) / 4% (8B) in a same-process A/B, and up to 6% of a
// grid-stride read; an `L2::evict_first` policy gained nothing measurable (bench/RESULTS.md, session 6).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Device-scope hand-offs between blocks without a fence: a fence (MEMBAR.GPU) waits for the SM's in-flight memory
// operations, which under PDL include the next kernel's early weight loads (bench/RESULTS.md, session 12: the decode
// attention's split arrival). Pattern: the block's writes, bar.sync, then thread 0's release (cumulative over what the
// barrier ordered before it); the reader's thread 0 acquires, then bar.sync before the block reads.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ unsigned long long atom_add_acq_rel_gpu(unsigned long long* p, unsigned long long v) {
  unsigned long long old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Timestamps for in-kernel traces (benchmarks): the GPU-wide nanosecond clock, comparable across SMs.
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// Unpacks 8 bf16 (one uint4) into floats.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  f[0] = bf16_lo(v.x); f[1] = bf16_hi(v.x);
  f[2] = bf16_lo(v.y); f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z); f[5] = bf16_hi(v.z);
  f[6] = bf16_lo(v.w); f[7] = bf16_hi(v.w);
}

// acc0 += w0 . x[0, 8) and acc1 += w1 . x[0, 8): 8 packed bf16 weights of two rows against 8 floats of x (16-byte
// aligned, usually shared memory). Every matvec (cuda/ops, the megakernel) sums in this order, so they agree.
__device__ __forceinline__ void dot8_pair(const float* x, const uint4& w0, const uint4& w1, float& acc0, float& acc1) {
  const float4 xa = *reinterpret_cast<const float4*>(x);
  const float4 xb = *reinterpret_cast<const float4*>(x + 4);
  float f[8];
  unpack8(w0, f);
  acc0 += f[0] * xa.x + f[1] * xa.y + f[2] * xa.z + f[3] * xa.w + f[4] * xb.x + f[5] * xb.y + f[6] * xb.z + f[7] * xb.w;
  unpack8(w1, f);
  acc1 += f[0] * xa.x + f[1] * xa.y + f[2] * xa.z + f[3] * xa.w + f[4] * xb.x + f[5] * xb.y + f[6] * xb.z + f[7] * xb.w;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. s_red: >= 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* s_red) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // s_red may still be read by a previous call
  if (lane == 0) s_red[warp] = v;
  __syncthreads();
  v = lane < n_warp ? s_red[lane] : 0.f;
  return warp_sum(v);
}

}  // namespace mk::cuda
