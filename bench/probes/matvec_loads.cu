// Measurement probe (not built by CMake): a 1 GiB grid-stride read with each 16-byte load flavour (L2 prefetch
// hints), then per matrix shape, in a CUDA graph of PDL launches over rotating copies: read-only kernels of three block
// shapes, the product's split-K matvec, and a prototype of its loop with parts left out (x staging, the cross-warp
// reduction) or one row per warp. bench/RESULTS.md "Session 6: matvec ablations" holds its figures (the version at
// 93aba71 gave the section before it, "Session 6: the L2::256B hint"). Build here, run on the GPU machine:
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 --expt-relaxed-constexpr -DMK_HAVE_CUDA=1 \
//     -Iinclude -Isrc bench/probes/matvec_loads.cu -o matvec_loads build/libmk_cuda.a build/libmk_core.a
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <functional>

#include "cuda/common/device.cuh"
#include "cuda/ops/matvec_internal.h"

using namespace mk::cuda;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

// 16-byte load flavours: 0 __ldg, 1 no L1 + 256-byte L2 prefetch (the product's load before session 6), 2 no L1
// (the product's now), 3 no L1 + 128-byte L2 prefetch, 4 plain ld.global.nc.
template <int LD>
__device__ __forceinline__ uint4 ldw(const void* p) {
  if constexpr (LD == 0) return __ldg(reinterpret_cast<const uint4*>(p));
  uint4 r;
  if constexpr (LD == 1)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  else if constexpr (LD == 2)
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  else if constexpr (LD == 3)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  else
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// ---- pure read (grid-stride, LOADS in flight), first batch before the PDL wait
template <int LOADS, int LD = 1, int THREADS = 1024>
__global__ void __launch_bounds__(THREADS) read_pdl(const uint4* __restrict__ p, size_t n, unsigned* out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  unsigned acc = 0;
  bool first = true;
  for (; i + (LOADS - 1) * stride < n; i += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) v[j] = ldw<LD>(p + i + j * stride);
    if (first) { pdl_wait(); pdl_launch_dependents(); first = false; }
#pragma unroll
    for (int j = 0; j < LOADS; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (first) { pdl_wait(); pdl_launch_dependents(); }
  for (; i < n; i += stride) { const uint4 a = ldw<LD>(p + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

// ---- split-K matvec prototype: item = (row pair, 1024-column slice), KS=4 loads per lane per row, pipelined
// halves as the product. SYNC 0: block barriers (product); 1: named barrier per pair (only its S warps);
// ROW1: one row per warp over KS2 chunks per lane (S slices of 32*KS2 chunks), named barrier per row.
template <int SYNC, int KS, int LD = 1, bool NOX = false, bool NORED = false>
__global__ void __launch_bounds__(256, 3) mv_proto(const __nv_bfloat16* __restrict__ w, int n_rows, int n_cols,
                                                  const float* __restrict__ x, float* out, int S, int P, int n_groups) {
  extern __shared__ float s_x[];
  __shared__ float s_part[8][2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pi = warp / S, si = warp % S;
  const int n_chunks = n_cols >> 3, n_pairs = n_rows / 2;
  constexpr int SLICE = KS * 32;
  uint4 wb[2][KS];
  auto load_part = [&](int pair, int u0, int u1) {
    const __nv_bfloat16* r0 = w + size_t(2 * pair) * size_t(n_cols);
    const __nv_bfloat16* r1 = r0 + n_cols;
#pragma unroll
    for (int u = 0; u < KS; ++u) {
      if (u < u0 || u >= u1) continue;
      const int c = si * SLICE + u * 32 + lane;
      if (c < n_chunks) { wb[0][u] = ldw<LD>(r0 + size_t(c) * 8); wb[1][u] = ldw<LD>(r1 + size_t(c) * 8); }
      else wb[0][u] = wb[1][u] = make_uint4(0, 0, 0, 0);
    }
  };
  int grp = blockIdx.x;
  if (grp < n_groups && grp * P + pi < n_pairs) load_part(grp * P + pi, 0, KS);
  pdl_wait();
  if (!NOX) {
    for (int i = threadIdx.x * 4; i < n_cols; i += blockDim.x * 4)
      *reinterpret_cast<float4*>(s_x + i) = __ldcg(reinterpret_cast<const float4*>(x + i));
    __syncthreads();
  }
  pdl_launch_dependents();
  for (; grp < n_groups; grp += gridDim.x) {
    const int pair = grp * P + pi;
    const bool valid = pair < n_pairs;
    const int next_pair = (grp + gridDim.x) * P + pi;
    const bool prefetch = grp + int(gridDim.x) < n_groups && next_pair < n_pairs;
    float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
    for (int u = 0; u < KS / 2; ++u) {
      const int c = si * SLICE + u * 32 + lane;
      if (valid && c < n_chunks) dot8_pair(s_x + c * 8, wb[0][u], wb[1][u], acc0, acc1);
    }
    if (prefetch) load_part(next_pair, 0, KS / 2);
#pragma unroll
    for (int u = KS / 2; u < KS; ++u) {
      const int c = si * SLICE + u * 32 + lane;
      if (valid && c < n_chunks) dot8_pair(s_x + c * 8, wb[0][u], wb[1][u], acc0, acc1);
    }
    if (prefetch) load_part(next_pair, KS / 2, KS);
    acc0 = warp_sum(acc0);
    acc1 = warp_sum(acc1);
    if (NORED) {
      if (valid && lane == 0) { out[2 * pair * S + si] = acc0; out[2 * pair * S + S + si] = acc1; }
      continue;
    }
    if (S > 1) {
      if (lane == 0) { s_part[warp][0] = acc0; s_part[warp][1] = acc1; }
      if (SYNC == 0) __syncthreads();
      else asm volatile("bar.sync %0, %1;" ::"r"(pi + 1), "r"(S * 32) : "memory");
      if (si == 0 && lane == 0) {
        acc0 = acc1 = 0.f;
        for (int k = 0; k < S; ++k) { acc0 += s_part[pi * S + k][0]; acc1 += s_part[pi * S + k][1]; }
      }
      if (SYNC == 0) __syncthreads();
      else asm volatile("bar.sync %0, %1;" ::"r"(pi + 1), "r"(S * 32) : "memory");
    }
    if (valid && si == 0 && lane == 0) { out[2 * pair] = acc0; out[2 * pair + 1] = acc1; }
  }
}

template <int KS2>
__global__ void __launch_bounds__(256, 3) mv_row(const __nv_bfloat16* __restrict__ w, int n_rows, int n_cols,
                                                const float* __restrict__ x, float* out) {
  extern __shared__ float s_x[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_chunks = n_cols >> 3;
  const int gw = blockIdx.x * 8 + warp, nw = gridDim.x * 8;
  uint4 wb[KS2];
  auto load_part = [&](int row, int u0, int u1) {
    const __nv_bfloat16* r0 = w + size_t(row) * size_t(n_cols);
#pragma unroll
    for (int u = 0; u < KS2; ++u) {
      if (u < u0 || u >= u1) continue;
      const int c = u * 32 + lane;
      wb[u] = c < n_chunks ? ldw<2>(r0 + size_t(c) * 8) : make_uint4(0, 0, 0, 0);
    }
  };
  int row = gw;
  if (row < n_rows) load_part(row, 0, KS2);
  pdl_wait();
  for (int i = threadIdx.x * 4; i < n_cols; i += blockDim.x * 4)
    *reinterpret_cast<float4*>(s_x + i) = __ldcg(reinterpret_cast<const float4*>(x + i));
  __syncthreads();
  pdl_launch_dependents();
  for (; row < n_rows; row += nw) {
    const bool prefetch = row + nw < n_rows;
    float acc = 0.f, dummy = 0.f;
#pragma unroll
    for (int u = 0; u < KS2 / 2; ++u) {
      const int c = u * 32 + lane;
      if (c < n_chunks) dot8_pair(s_x + c * 8, wb[u], wb[u], acc, dummy);
    }
    if (prefetch) load_part(row + nw, 0, KS2 / 2);
#pragma unroll
    for (int u = KS2 / 2; u < KS2; ++u) {
      const int c = u * 32 + lane;
      if (c < n_chunks) dot8_pair(s_x + c * 8, wb[u], wb[u], acc, dummy);
    }
    if (prefetch) load_part(row + nw, KS2 / 2, KS2);
    acc = warp_sum(acc);
    if (lane == 0) out[row] = acc + dummy * 0.f;
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
  template <class F> float ms(cudaStream_t s, F f) {
    cudaEventRecord(a, s); f(); cudaEventRecord(b, s); CK(cudaEventSynchronize(b));
    float m; cudaEventElapsedTime(&m, a, b); return m;
  }
};

template <class K, class... A>
void launch_pdl(cudaStream_t s, K k, dim3 g, dim3 b, size_t smem, A... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = g; cfg.blockDim = b; cfg.dynamicSmemBytes = smem; cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, args...));
}

// median over reps of (graph of `chain` launches) / chain, in us
double chain_us(cudaStream_t s, int chain, int reps, const std::function<void(int)>& one) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < chain; ++i) one(i);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  Timer t;
  std::vector<float> v;
  for (int r = 0; r < reps + 3; ++r) { float m = t.ms(s, [&] { CK(cudaGraphLaunch(ge, s)); }); if (r >= 3) v.push_back(m); }
  std::sort(v.begin(), v.end());
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return v[v.size() / 2] * 1e3 / chain;
}

int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t pool = size_t(1) << 30;  // 1 GiB of weights, rotated
  void* w; CK(cudaMalloc(&w, pool)); CK(cudaMemset(w, 0x3c, pool));
  float* x; CK(cudaMalloc(&x, 65536 * 4)); CK(cudaMemset(x, 0, 65536 * 4));
  float* y; CK(cudaMalloc(&y, size_t(1) << 26));
  unsigned* o; CK(cudaMalloc(&o, 64));
  // ceiling: read 1 GiB, gridstride4 1024x2
  Timer t;
  std::vector<float> cv;
  for (int r = 0; r < 400; ++r) read_pdl<4><<<sms * 2, 1024, 0, s>>>((const uint4*)w, pool / 16, o);  // clocks up
  for (int r = 0; r < 21; ++r) cv.push_back(t.ms(s, [&] { read_pdl<4><<<sms * 2, 1024, 0, s>>>((const uint4*)w, pool / 16, o); }));
  std::sort(cv.begin(), cv.end());
  const double ceil = double(pool) / (cv[10] * 1e-3) / 1e12;
  printf("ceiling (1 GiB read, L2::256B hint) %.3f TB/s\n", ceil);
  auto ceil_ld = [&](auto k, const char* name) {
    std::vector<float> v;
    for (int r = 0; r < 21; ++r) v.push_back(t.ms(s, [&] { k<<<sms * 2, 1024, 0, s>>>((const uint4*)w, pool / 16, o); }));
    std::sort(v.begin(), v.end());
    printf("  1 GiB read %-28s %.3f TB/s\n", name, double(pool) / (v[10] * 1e-3) / 1e12);
  };
  ceil_ld(read_pdl<4, 0>, "__ldg");
  ceil_ld(read_pdl<4, 1>, "nc.no_allocate.L2::256B");
  ceil_ld(read_pdl<4, 2>, "nc.no_allocate");
  ceil_ld(read_pdl<4, 3>, "nc.no_allocate.L2::128B");
  ceil_ld(read_pdl<4, 4>, "nc (L1 allocate)");
  ceil_ld(read_pdl<4, 0>, "__ldg again");
  struct Sh { int r, c; };
  auto mv_smem = [](int c) { return size_t(c) * 4; };
  auto smem_attr = [](auto k) { CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); };
  smem_attr(mv_proto<0, 4, 2>); smem_attr(mv_proto<0, 4, 2, true>); smem_attr(mv_proto<0, 4, 2, false, true>);
  smem_attr(mv_proto<0, 4, 2, true, true>); smem_attr(mv_row<8>);
  const Sh shapes[] = {{8192, 2048}, {2048, 8192}, {16384, 2048}, {65536, 2048}, {3072, 2048}};
  for (const Sh& sh : shapes) {
    const size_t bytes = size_t(sh.r) * sh.c * 2;
    const int copies = int(std::min<size_t>(64, pool / bytes));
    auto wp = [&](int i) { return (const char*)w + size_t(i % copies) * bytes; };
    const int chain = std::max(8, std::min(64, int((size_t(2) << 30) / bytes)));
    const int S = (sh.c / 8 + 127) / 128, P = std::max(1, 8 / S), n_groups = (sh.r / 2 + P - 1) / P;
    const int blocks = std::min(n_groups, sms * 3);
    auto proto = [&](auto k) {
      return chain_us(s, chain, 5, [&](int i) { launch_pdl(s, k, dim3(blocks), dim3(32 * S * P), mv_smem(sh.c), (const __nv_bfloat16*)wp(i), sh.r, sh.c, (const float*)x, y, S, P, n_groups); });
    };
    double rd = chain_us(s, chain, 5, [&](int i) { launch_pdl(s, read_pdl<4, 2>, dim3(sms * 2), dim3(1024), 0, (const uint4*)wp(i), bytes / 16, o); });
    double rd256 = chain_us(s, chain, 5, [&](int i) { launch_pdl(s, read_pdl<4, 2, 256>, dim3(sms * 8), dim3(256), 0, (const uint4*)wp(i), bytes / 16, o); });
    double rd256x6 = chain_us(s, chain, 5, [&](int i) { launch_pdl(s, read_pdl<8, 2, 256>, dim3(sms * 3), dim3(256), 0, (const uint4*)wp(i), bytes / 16, o); });
    double prod = chain_us(s, chain, 5, [&](int i) {
      MatvecArgs a; a.w = (const bf16*)wp(i); a.n_rows = sh.r; a.n_cols = sh.c; a.x = x; a.out = y + size_t(i % 8) * sh.r;
      matvec_splitk(Stream(s, true), a); });
    double p0 = proto(mv_proto<0, 4, 2>);
    double pnx = proto(mv_proto<0, 4, 2, true>);
    double pnr = proto(mv_proto<0, 4, 2, false, true>);
    double pnn = proto(mv_proto<0, 4, 2, true, true>);
    double row = -1;
    if (sh.c <= 2048) {
      const int rb = std::min((sh.r + 7) / 8, sms * 3);
      row = chain_us(s, chain, 5, [&](int i) { launch_pdl(s, mv_row<8>, dim3(rb), dim3(256), mv_smem(sh.c), (const __nv_bfloat16*)wp(i), sh.r, sh.c, (const float*)x, y); });
    }
    printf("%6dx%-5d us: read1024x2 %6.2f read256x8 %6.2f read256x3(8 ld) %6.2f | splitk %6.2f proto %6.2f noX %6.2f noRed %6.2f noX+noRed %6.2f row/warp %6.2f\n",
           sh.r, sh.c, rd, rd256, rd256x6, prod, p0, pnx, pnr, pnn, row);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
