// draw_probe (sample_probe.h): the megakernel's two-stage draw over host-given logits.
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
    partial_probe_kernel(const __grid_constant__ device::MkParams p, float hint, uint32_t epoch) {
  extern __shared__ __align__(128) float smem[];
  if (threadIdx.x >= device::NCT) return;
  float* s_red = smem + p.smem_x_floats + p.smem_aux_floats;
  const float m = device::sample_max<FLAG>(p, hint, s_red, epoch, 0);
  int r0, r1;
  p.L.sample_part_range(int(blockIdx.x), r0, r1);
  device::sample_partial<FLAG>(p, int(blockIdx.x), r0, r1, m, smem, epoch, 0);
}

template <bool FLAG>
__global__ void __launch_bounds__(device::THREADS, 1)
    pick_probe_kernel(const __grid_constant__ device::MkParams p, uint32_t epoch, int n_draws, int32_t* out) {
  extern __shared__ __align__(128) float smem[];
  if (threadIdx.x >= device::NCT) return;
  for (int d = 0; d < n_draws; ++d) {
    const int32_t t = device::sample_pick<FLAG>(p, smem, epoch, 0, p.sample.first_draw + uint64_t(d));
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
                               int part_tiles) {
  if (logits.empty() || n_draws < 1 || part_tiles < 1 || !(sp.temperature > 0.f))
    return make_error("draw_probe: needs logits, n_draws >= 1, part_tiles >= 1 and a temperature > 0");
  const int V = int(logits.size()), padded = (V + 3) / 4 * 4;
  const int n_parts = Layout::sample_parts(V, part_tiles);
  const uint32_t epoch = 77;
  // The workspace: logits [padded] (the padding stale, never a candidate), then the records [n_parts][4] (stale).
  const size_t n = size_t(padded) + 4 * size_t(n_parts);
  std::vector<float> lp(logits.begin(), logits.end());
  lp.resize(n, 1e30f);
  std::vector<unsigned long long> pairs(n);  // (value bits | epoch << 32)
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lp[i], 4);
    pairs[i] = (static_cast<unsigned long long>(i < size_t(V) ? epoch : epoch - 1) << 32) | bits;
  }
  float* ws = nullptr;
  unsigned long long* fws = nullptr;
  uint32_t* err = nullptr;
  int32_t* out = nullptr;
  CUDA_CHECK(cudaMalloc(&ws, n * 4));
  CUDA_CHECK(cudaMalloc(&fws, n * 8));
  CUDA_CHECK(cudaMalloc(&err, 16));
  CUDA_CHECK(cudaMalloc(&out, size_t(n_draws) * 4));
  CUDA_CHECK(cudaMemcpy(ws, lp.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(fws, pairs.data(), n * 8, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(err, 0, 16));
  device::MkParams p{};
  p.L.n_vocab = V;
  p.L.logits = 0;
  p.L.sample_part = padded;
  p.L.n_sample_parts = n_parts;
  p.L.sample_part_tiles = part_tiles;
  p.smem_x_floats = (device::sample_scratch_floats(n_parts, part_tiles) + 3) / 4 * 4;
  p.smem_aux_floats = 0;
  p.sample = sp;
  p.watchdog_cycles = 2000000000ll;
  p.ws = ws, p.fws = fws, p.error = err;
  const size_t smem = size_t(p.smem_x_floats + 64) * 4;
  auto kp = flags ? partial_probe_kernel<true> : partial_probe_kernel<false>;
  auto kd = flags ? pick_probe_kernel<true> : pick_probe_kernel<false>;
  CUDA_CHECK(cudaFuncSetAttribute(kp, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(kd, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const float hint = amax_hint(logits);
  cudaEvent_t e[3];
  for (auto& x : e) CUDA_CHECK(cudaEventCreate(&x));
  kp<<<n_parts, device::THREADS, smem>>>(p, hint, epoch);  // warm-up
  kd<<<1, device::THREADS, smem>>>(p, epoch, 1, out);
  CUDA_CHECK(cudaEventRecord(e[0]));
  kp<<<n_parts, device::THREADS, smem>>>(p, hint, epoch);
  CUDA_CHECK(cudaEventRecord(e[1]));
  kd<<<1, device::THREADS, smem>>>(p, epoch, n_draws, out);
  CUDA_CHECK(cudaEventRecord(e[2]));
  CUDA_CHECK(cudaEventSynchronize(e[2]));
  CUDA_CHECK(cudaGetLastError());
  DrawProbe r;
  r.n_parts = n_parts;
  float ms[2] = {};
  CUDA_CHECK(cudaEventElapsedTime(&ms[0], e[0], e[1]));
  CUDA_CHECK(cudaEventElapsedTime(&ms[1], e[1], e[2]));
  r.partial_us = 1e3 * double(ms[0]), r.pick_us = 1e3 * double(ms[1]) / n_draws;
  r.ids.resize(size_t(n_draws));
  CUDA_CHECK(cudaMemcpy(r.ids.data(), out, size_t(n_draws) * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&r.error, err, 4, cudaMemcpyDeviceToHost));
  for (auto& x : e) cudaEventDestroy(x);
  for (void* q : {static_cast<void*>(ws), static_cast<void*>(fws), static_cast<void*>(err), static_cast<void*>(out)})
    cudaFree(q);
  return r;
}

}  // namespace mk::megakernel
