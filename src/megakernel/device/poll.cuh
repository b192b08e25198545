// The megakernel's loads of other SMs' data and its consumer barrier, apart from common.cuh so that a translation unit
// other than the interpreter (device/sample_probe.cu) can use them: activation loads from L2, the flag-in-data pairs
// (params.cuh MkParams::flags) and their watchdog, named barrier 1 of the consumer threads. All force-inlined.
#pragma once
#include <cstdint>

#include "megakernel/device/params.cuh"

namespace mk::megakernel::device {

// Activations written by other SMs in this launch: read from L2 (L1 is not coherent across SMs).
__device__ __forceinline__ float ld_act(const float* p) { return __ldcg(p); }

// Barrier of the NCT consumer threads (named barrier 1; the loader warp never takes part).
__device__ __forceinline__ void csync() { asm volatile("bar.sync 1, %0;" ::"n"(NCT) : "memory"); }

__device__ __forceinline__ float4 ld_act4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }

// ---- flag-in-data (params.cuh MkParams::flags) ----
using u64 = unsigned long long;
__device__ __forceinline__ u64 flag_pair(float v, uint32_t epoch) { return (u64(epoch) << 32) | __float_as_uint(v); }
__device__ __forceinline__ void st_flag(u64* p, float v, uint32_t epoch) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(flag_pair(v, epoch)) : "memory");
}
__device__ __forceinline__ u64 ld_flag(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
// Two pairs (16 B); each 8-byte element is single-copy atomic on its own, which is all a pair needs.
__device__ __forceinline__ ulonglong2 ld_flag2(const u64* p) {
  ulonglong2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ bool fresh(u64 v, uint32_t e) { return uint32_t(v >> 32) == e; }
__device__ __forceinline__ float flag_val(u64 v) { return __uint_as_float(uint32_t(v)); }

// Four consecutive pairs (32 B, two loads).
struct Pairs4 {
  ulonglong2 a, b;
};
__device__ __forceinline__ Pairs4 ld_pairs4(const u64* p) { return {ld_flag2(p), ld_flag2(p + 2)}; }
__device__ __forceinline__ bool fresh4(const Pairs4& q, uint32_t e) {
  return fresh(q.a.x, e) & fresh(q.a.y, e) & fresh(q.b.x, e) & fresh(q.b.y, e);
}
__device__ __forceinline__ float4 val4(const Pairs4& q) {
  return make_float4(flag_val(q.a.x), flag_val(q.a.y), flag_val(q.b.x), flag_val(q.b.y));
}

// A poll that has spun too long: the watchdog (as wait_deps), or another block's error. Returns true
// when the caller must give up (its values are then garbage; the launch is reported broken).
// (Scalars, not the Ctx: kept apart from the hot loop so it stays small.)
__device__ __forceinline__ bool flag_poll_expired(const MkParams& p, uint32_t instr, long long t0) {
  if (clock64() - t0 > p.watchdog_cycles) {
    if (atomicCAS(p.error, 0u, 1u) == 0u) p.error[1] = blockIdx.x, p.error[2] = instr, p.error[3] = FLAG_WATCHDOG_COUNTER;
    return true;
  }
  return *reinterpret_cast<volatile const uint32_t*>(p.error) != 0;
}

}  // namespace mk::megakernel::device
