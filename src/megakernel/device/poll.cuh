// The megakernel's loads of other SMs' data and its consumer barrier, apart from common.cuh so that a translation unit
// other than the interpreter (device/sample_probe.cu) can use them: activation loads from L2, the flag-in-data pairs
// (params.cuh MkParams::flags) and their watchdog, named barrier 1 of the consumer threads. All force-inlined.
#pragma once
#include <cuda_bf16.h>

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

// Packed flagged words (session 19; the act vector, ops/mlp.cuh): bf16 value in the high half, the low 16 bits of
// the epoch in the low half, 4 bytes per element -- half the bytes of a pair, so a 16-byte load checks 4 elements.
// 16 tag bits suffice: every step writes every element, so a stale word is from the step before (a reader at epoch e
// sees e or e - 1, never e - 65536); the poison 0xffffffff of a fresh workspace is stale at epoch 0.
__device__ __forceinline__ uint32_t act_word(float v, uint32_t epoch) {
  return (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(v))) << 16) | (epoch & 0xffffu);
}
__device__ __forceinline__ bool fresh_word(uint32_t w, uint32_t e) { return ((w ^ e) & 0xffffu) == 0; }
__device__ __forceinline__ float word_val(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ void st_word(uint32_t* p, uint32_t w) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(w) : "memory");
}
__device__ __forceinline__ uint4 ld_words4(const uint32_t* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// One contribution to the mid-layer residual accumulator (isa.h mid_acc_word): one relaxed L2 atomic, no fence.
__device__ __forceinline__ void red_acc(u64* p, float v) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(mid_acc_word(v)) : "memory");
}
__device__ __forceinline__ void st_zero(u64* p) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], 0;" ::"l"(p) : "memory");
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

// The pair at a, polled until it holds `epoch` (or the watchdog gives up: the value is then garbage).
__device__ __forceinline__ u64 poll_flag(const MkParams& p, const u64* a, uint32_t epoch, uint32_t instr) {
  u64 v = ld_flag(a);
  if (fresh(v, epoch)) return v;
  const long long t0 = clock64();
  for (uint32_t n = 0; !fresh(v, epoch); ++n) {
    if ((n & 63u) == 1u && flag_poll_expired(p, instr, t0)) break;
    v = ld_flag(a);
  }
  return v;
}

}  // namespace mk::megakernel::device
