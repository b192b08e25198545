// The first decode matvec (kept as a fallback and for comparison: MK_MATVEC=rowpair): one warp owns a pair of
// adjacent rows at a time (grid-stride over pairs), the whole row length; x staged in shared memory per block.
// The default kernel is matvec.cu (split-K, fused RoPE).
#include "cuda/ops/matvec_internal.h"

#include <algorithm>

#include "cuda/common/device.cuh"
#include "cuda/common/sm_count.h"
#include "cuda/device_info.h"

namespace mk::cuda {
namespace {

constexpr int WARPS = 8;      // warps per block
constexpr int THREADS = WARPS * 32;
constexpr int U = 8;          // chunks per lane per batch (x 2 rows = 16 loads of 16 bytes in flight)

struct Params {
  MatvecArgs a;
};

template <bool NORM, class XT>
__device__ void stage_x(float* s_x, float* s_red, const XT* x, const float* norm_w, float eps, int n) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v;
    if constexpr (sizeof(XT) == 4) v = x[i];
    else v = __bfloat162float(x[i]);
    s_x[i] = v;
    if constexpr (NORM) ss += v * v;
  }
  if constexpr (NORM) {
    float inv = rsqrtf(block_sum(ss, s_red) / float(n) + eps);
    // Each thread rescales only the elements it wrote itself: no barrier needed before this loop.
    for (int i = threadIdx.x; i < n; i += blockDim.x) s_x[i] = s_x[i] * inv * norm_w[i];
  }
  __syncthreads();
}

template <MatvecOut MODE, bool NORM, bool ARGMAX, class XT>
__global__ void __launch_bounds__(THREADS) matvec_kernel(Params p) {
  extern __shared__ float s_x[];  // [n_cols] staged (normalised) input
  __shared__ float s_red[32];
  __shared__ unsigned long long s_best[WARPS];
  const MatvecArgs& a = p.a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_chunks = a.n_cols >> 3;
  const int per_lane = (n_chunks + 31) >> 5;
  const int n_pairs = (a.n_rows + 1) >> 1;  // an odd last row pairs with nothing (STORE / ADD only)
  const int warp_stride = gridDim.x * WARPS;
  int g = blockIdx.x * WARPS + warp;

  uint4 wb[2][U];
  auto load_batch = [&](int pair, int j0) {
    const bf16* r0 = a.w + size_t(2 * pair) * size_t(a.n_cols);
    const bool has1 = 2 * pair + 1 < a.n_rows;
    const bf16* r1 = has1 ? r0 + a.n_cols : r0;  // re-reads row 0 (cached) rather than branching per load
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int c = (j0 + u) * 32 + lane;
      if (j0 + u < per_lane && c < n_chunks) {
        wb[0][u] = ld_stream(r0 + size_t(c) * 8);
        wb[1][u] = ld_stream(r1 + size_t(c) * 8);
      } else {
        wb[0][u] = make_uint4(0, 0, 0, 0);
        wb[1][u] = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // Weights do not depend on the previous kernel: start streaming them before waiting for it.
  if (g < n_pairs) load_batch(g, 0);
  pdl_wait();
  if constexpr (sizeof(XT) == 4) stage_x<NORM>(s_x, s_red, a.x, a.norm_w, a.eps, a.n_cols);
  else stage_x<NORM>(s_x, s_red, a.x_bf16, a.norm_w, a.eps, a.n_cols);
  pdl_launch_dependents();

  unsigned long long best = 0;
  bool loaded = true;
  for (; g < n_pairs; g += warp_stride) {
    float acc0 = 0.f, acc1 = 0.f;
    for (int j0 = 0; j0 < per_lane; j0 += U) {
      if (!loaded) load_batch(g, j0);
      loaded = false;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int c = (j0 + u) * 32 + lane;
        if (j0 + u < per_lane && c < n_chunks) {
          dot8_pair(s_x + c * 8, wb[0][u], wb[1][u], acc0, acc1);
        }
      }
    }
    acc0 = warp_sum(acc0);
    acc1 = warp_sum(acc1);
    if (lane == 0) {
      const int r = 2 * g;
      store_row_pair<MODE, ARGMAX>(a, r, r + 1 < a.n_rows, acc0, acc1, best);
    }
  }
  if constexpr (ARGMAX) argmax_commit(a.argmax, s_best, best, WARPS, [] { __syncthreads(); });
}

template <MatvecOut MODE, bool NORM, bool ARGMAX, class XT>
void launch_matvec(const Stream& s, const MatvecArgs& a) {
  auto kernel = matvec_kernel<MODE, NORM, ARGMAX, XT>;
  static int blocks_per_sm = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, THREADS, 32 * 1024));
    return std::max(1, n);
  }();
  int n_pairs = (a.n_rows + 1) / 2;
  int blocks = std::min((n_pairs + WARPS - 1) / WARPS, sm_count() * std::min(blocks_per_sm, 2));
  size_t smem = size_t(a.n_cols) * sizeof(float);
  launch(s, dim3(blocks), dim3(THREADS), smem, kernel, Params{a});
}

template <MatvecOut MODE, bool NORM, bool ARGMAX>
void dispatch_x(const Stream& s, const MatvecArgs& a) {
  if (a.x) launch_matvec<MODE, NORM, ARGMAX, float>(s, a);
  else launch_matvec<MODE, NORM, ARGMAX, bf16>(s, a);
}

}  // namespace

void matvec_rowpair(const Stream& s, const MatvecArgs& a) {
  MK_CHECK(a.mode != MatvecOut::ROPE_QKV && a.mode != MatvecOut::ROPE_QKV_NORM &&
           "ROPE_QKV(_NORM) is served by the split-K kernel only");
  dispatch_matvec(a, [&]<MatvecOut MODE, bool NORM, bool ARGMAX>() {
    if constexpr (MODE != MatvecOut::ROPE_QKV && MODE != MatvecOut::ROPE_QKV_NORM) dispatch_x<MODE, NORM, ARGMAX>(s, a);
  });
}

}  // namespace mk::cuda
