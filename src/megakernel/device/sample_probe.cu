// draw_probe (sample_probe.h): sample_token on one block over host-given logits.
#include "megakernel/device/sample_probe.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "cuda/common/cuda_check.h"
#include "megakernel/device/ops/sample.cuh"

namespace mk::megakernel {

namespace {

template <bool FLAG>
__global__ void __launch_bounds__(device::THREADS, 1)
    draw_probe_kernel(const __grid_constant__ device::MkParams p, float hint, uint32_t epoch, int n_draws, int32_t* out) {
  extern __shared__ __align__(128) float smem[];
  if (threadIdx.x >= device::NCT) return;
  float* s_x = smem;
  float* s_aux = s_x + p.smem_x_floats;
  float* s_red = s_aux + p.smem_aux_floats;
  for (int d = 0; d < n_draws; ++d) {
    const int32_t t = device::sample_token<FLAG>(p, s_x, s_aux, s_red, hint, epoch, 0, p.sample.first_draw + uint64_t(d));
    if (threadIdx.x == 0) out[d] = t;
    device::csync();
  }
}

float amax_hint(std::span<const float> l) {
  float h = -INFINITY;
  for (float v : l) {
    if (std::isnan(v)) return NAN;
    h = std::max(h, v);
  }
  return h;
}

}  // namespace

Expected<DrawProbe> draw_probe(std::span<const float> logits, const SampleParams& sp, int n_draws, bool flags,
                               int x_floats) {
  if (logits.empty() || n_draws < 1 || x_floats < 4 || !(sp.temperature > 0.f))
    return make_error("draw_probe: needs logits, n_draws >= 1, x_floats >= 4 and a temperature > 0");
  const int V = int(logits.size()), padded = (V + 3) / 4 * 4;
  const uint32_t epoch = 77;
  std::vector<float> lp(logits.begin(), logits.end());  // [padded] the padding stale / never a candidate
  lp.resize(size_t(padded), 1e30f);
  std::vector<unsigned long long> pairs(static_cast<size_t>(padded));  // [padded] (value bits | epoch << 32)
  for (int i = 0; i < padded; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lp[size_t(i)], 4);
    pairs[size_t(i)] = (static_cast<unsigned long long>(i < V ? epoch : epoch - 1) << 32) | bits;
  }
  float* ws = nullptr;
  unsigned long long* fws = nullptr;
  uint32_t* err = nullptr;
  int32_t* out = nullptr;
  CUDA_CHECK(cudaMalloc(&ws, size_t(padded) * 4));
  CUDA_CHECK(cudaMalloc(&fws, size_t(padded) * 8));
  CUDA_CHECK(cudaMalloc(&err, 16));
  CUDA_CHECK(cudaMalloc(&out, size_t(n_draws) * 4));
  CUDA_CHECK(cudaMemcpy(ws, lp.data(), size_t(padded) * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(fws, pairs.data(), size_t(padded) * 8, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(err, 0, 16));
  device::MkParams p{};
  p.L.n_vocab = V;
  p.L.logits = 0;
  p.smem_x_floats = x_floats;
  p.smem_aux_floats = 256;
  p.sample = sp;
  p.watchdog_cycles = 2000000000ll;
  p.ws = ws, p.fws = fws, p.error = err;
  const size_t smem = size_t(p.smem_x_floats + p.smem_aux_floats + 64) * 4;
  auto k = flags ? draw_probe_kernel<true> : draw_probe_kernel<false>;
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const float hint = amax_hint(logits);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  k<<<1, device::THREADS, smem>>>(p, hint, epoch, 1, out);  // warm-up
  CUDA_CHECK(cudaEventRecord(e0));
  k<<<1, device::THREADS, smem>>>(p, hint, epoch, n_draws, out);
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  CUDA_CHECK(cudaGetLastError());
  DrawProbe r;
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  r.us_per_draw = 1e3 * double(ms) / n_draws;
  r.ids.resize(size_t(n_draws));
  CUDA_CHECK(cudaMemcpy(r.ids.data(), out, size_t(n_draws) * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&r.error, err, 4, cudaMemcpyDeviceToHost));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (void* q : {static_cast<void*>(ws), static_cast<void*>(fws), static_cast<void*>(err), static_cast<void*>(out)})
    cudaFree(q);
  return r;
}

}  // namespace mk::megakernel
