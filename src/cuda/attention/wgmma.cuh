// Thin inline-PTX wrappers of the Hopper warpgroup MMA (wgmma) and shared-memory matrix descriptors used by the
// FA3-style prefill kernel (generated shapes only: m64n128k16 SS or RS (K-major B) for S = Q K^T, m64n{64,128}k16
// RS for O += P V).
// Accumulator layout per warp w of the warpgroup (rows 16w..16w+15), per 8-column chunk j: d[j][0..1] =
// (row g, cols 8j+2t..+1), d[j][2..3] = (row g+8, same cols), g = lane/4, t = lane%4 -- the mma.sync m16n8
// layout, so the softmax code is shared with the FA2 kernel.
#pragma once
#include <cstdint>

namespace mk::cuda::attn {

// Descriptor of a 128-byte-swizzled operand tile in shared memory (1024-byte aligned atoms of 8 rows x 128 B).
// K-major: sbo = 1024 (next 8 rows), lbo unused. MN-major: lbo = offset of the next 64-element chunk along
// N, sbo = 1024 (next 8 rows along K).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = (smem_addr & 0x3FFFFu) >> 4;
  d |= uint64_t((lbo & 0x3FFFFu) >> 4) << 16;
  d |= uint64_t((sbo & 0x3FFFFu) >> 4) << 32;
  d |= uint64_t(1) << 62;  // 128-byte swizzle
  return d;
}

// desc (from wgmma_desc) moved by `off` bytes: a 32-bit add to the start-address field (bits 0-13, address >> 4),
// which cannot carry into the next field because shared-memory addresses stay below 2^18. One uniform add per
// wgmma instead of wgmma_desc's mask / shift / or chain, which ptxas otherwise issues inside the ping-pong turn.
__device__ __forceinline__ uint64_t wgmma_desc_at(uint64_t desc, uint32_t off) {
  const uint32_t lo = uint32_t(desc) + (off >> 4), hi = uint32_t(desc >> 32);
  return (uint64_t(hi) << 32) | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Output operand lists of the wgmma wrappers below: a warpgroup's fp32 accumulator fragment d[rows][4] read and
// written in place ("+f"), 8 or 16 rows of four.
#define MK_WGMMA_D4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define MK_WGMMA_D8(d)                                                                                          \
  MK_WGMMA_D4(d, 0), MK_WGMMA_D4(d, 1), MK_WGMMA_D4(d, 2), MK_WGMMA_D4(d, 3), MK_WGMMA_D4(d, 4), MK_WGMMA_D4(d, 5), \
      MK_WGMMA_D4(d, 6), MK_WGMMA_D4(d, 7)
#define MK_WGMMA_D16(d)                                                                                           \
  MK_WGMMA_D8(d), MK_WGMMA_D4(d, 8), MK_WGMMA_D4(d, 9), MK_WGMMA_D4(d, 10), MK_WGMMA_D4(d, 11), MK_WGMMA_D4(d, 12), \
      MK_WGMMA_D4(d, 13), MK_WGMMA_D4(d, 14), MK_WGMMA_D4(d, 15)

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// D[64x128] (+)= A[64x16] (smem, K-major) * B[16x128] (smem, K-major: stored [128][16]); scale_d = 0 overwrites.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : MK_WGMMA_D16(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64x128] (+)= A[64x16] (registers, bf16x2 fragments) * B[16x128] (smem, K-major: stored [128][16]);
// scale_d = 0 overwrites (S = Q K^T with Q held in registers).
__device__ __forceinline__ void wgmma_m64n128k16_rs_kmajor(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b,
                                                           int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : MK_WGMMA_D16(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// D[64x64] += A[64x16] (registers, bf16x2 fragments) * B[16x64] (smem, MN-major: stored [16][64]).
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : MK_WGMMA_D8(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// D[64x128] += A[64x16] (registers, bf16x2 fragments) * B[16x128] (smem, MN-major: stored [16][128]).
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : MK_WGMMA_D16(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

}  // namespace mk::cuda::attn
