// Device helpers shared by the attention kernels: cp.async, ldmatrix, mma.sync (bf16), the XOR-swizzled
// shared-memory tile layout, paged-KV row addressing and the FA-4 exponential (polynomial exp2 on FMA units).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace mk::cuda::attn {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// ---- shared-memory tile [rows][D] bf16, 16-byte chunks XOR-swizzled by (row & 7) so that ldmatrix's 8 rows of
// one column chunk hit 8 different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {  // element offset of (row, col)
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 zero-fills the destination (rows past the sequence end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}

// D(16x8 f32) += A(16x16 bf16, row) * B(16x8 bf16, col)
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// exp2 on the MUFU unit.
__device__ __forceinline__ float exp2_mufu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// FA-4 (a): exp2 on the FMA units. x = n + f, 2^f by a degree-3 polynomial (relative error 8.6e-5, below
// bf16's half ulp 2^-9), 2^n by adding n to the exponent field. Valid for x <= 8 (lazy rescaling keeps the
// probabilities below 2^threshold); x < -127 flushes to 0.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -127.f);
  const float n = floorf(x);
  const float f = x - n;
  float p = fmaf(0.07706157f, f, 0.22765097f);
  p = fmaf(p, f, 0.69511545f);
  p = fmaf(p, f, 1.0f);
  const int bits = __float_as_int(p) + (static_cast<int>(n) << 23);
  return __int_as_float(bits);
}

// Element offset of key position `pos` (head hk) in a paged pool [n_blocks, block_size, n_kv_head, D].
__device__ __forceinline__ int64_t paged_row(const int32_t* block_table_row, int block_size, int n_kv_head, int D,
                                             int pos, int hk) {
  const int blk = block_table_row[pos / block_size];
  return ((int64_t(blk) * block_size + pos % block_size) * n_kv_head + hk) * D;
}

}  // namespace mk::cuda::attn
