// On-device sampling of one token by one thread block: the host Sampler's rule (runtime/sampler.h) for a
// temperature with an optional min-p and nothing else (no top-k, top-p or repetition penalty), so that a decode
// loop on the device draws what the host loop would from the same logits, seed and draw index.
//   candidates x_i = (l_i - max finite l) / T in float (non-finite ones dropped), min-p keeps x_i >= log(min_p)
//   (the largest candidate is 0), weights exp(x_i) in double walked in ascending id order; the first id whose
//   running sum exceeds u * total is chosen, u = philox_uniform(seed, draw); the last kept id if none does.
// Each thread owns a contiguous id range; the running sums are per-thread sums plus a block scan of them, so they
// differ from the host's one sequential sum by rounding only (a different id needs u * total within ~1e-15 of a
// boundary). Test: tests/gpu/test_ops_sample.cu (against mk::Sampler).
#pragma once
#include <cstdint>

#include "core/philox.h"

namespace mk::cuda {

// Every thread of the block calls it (blockDim.x a multiple of 32, at most 1024); all get the id, or -1 when no
// logit is finite (the host Sampler's -1). T > 0, 0 <= min_p <= 1.
__device__ inline int32_t block_sample(const float* logits, int n_vocab, float T, float min_p, uint64_t seed,
                                       uint64_t draw) {
  __shared__ float s_f[32];
  __shared__ double s_d[32];
  __shared__ int s_i[32];
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
  const int per = (n_vocab + nt - 1) / nt, i0 = min(n_vocab, tid * per), i1 = min(n_vocab, i0 + per);
  auto block_max_f = [&](float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();  // s_f may still be read by the previous reduction
    if (lane == 0) s_f[warp] = v;
    __syncthreads();
    v = s_f[0];
    for (int w = 1; w < nw; ++w) v = fmaxf(v, s_f[w]);
    return v;
  };
  auto block_min_max_i = [&](int v, bool want_max) {
    for (int o = 16; o > 0; o >>= 1) {
      const int u = __shfl_xor_sync(0xffffffffu, v, o);
      v = want_max ? max(v, u) : min(v, u);
    }
    __syncthreads();
    if (lane == 0) s_i[warp] = v;
    __syncthreads();
    v = s_i[0];
    for (int w = 1; w < nw; ++w) v = want_max ? max(v, s_i[w]) : min(v, s_i[w]);
    return v;
  };

  float m = -INFINITY;
  for (int i = i0; i < i1; ++i) {
    const float l = __ldg(logits + i);
    if (isfinite(l)) m = fmaxf(m, l);
  }
  m = block_max_f(m);
  if (m == -INFINITY) return -1;
  const double cut = min_p > 0.f ? log(double(min_p)) : -INFINITY;
  auto weight = [&](int i) {  // 0 for a dropped candidate (adds nothing, never chosen)
    const float x = __fdiv_rn(__fsub_rn(__ldg(logits + i), m), T);
    return isfinite(x) && double(x) >= cut ? exp(double(x)) : 0.0;
  };
  double local = 0;
  int last_kept = -1;
  for (int i = i0; i < i1; ++i) {
    const double w = weight(i);
    local += w;
    if (w > 0) last_kept = i;
  }
  // Exclusive block scan of the per-thread sums (warp shuffles, then the warp totals in order).
  double incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const double v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) s_d[warp] = incl;
  __syncthreads();
  double before = 0, total = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < warp) before += s_d[w];
    total += s_d[w];
  }
  const double prefix = before + incl - local;
  const double target = philox_uniform(seed, draw) * total;
  // The owner: the first thread whose range takes the running sum past the target.
  const int owner = block_min_max_i(prefix + local > target ? tid : nt, false);
  const int fallback = block_min_max_i(last_kept, true);  // the host's "u * total rounded up to total"
  __shared__ int s_pick;
  if (tid == 0) s_pick = fallback;
  __syncthreads();
  if (tid == owner) {
    double run = prefix;
    for (int i = i0; i < i1; ++i) {
      const double w = weight(i);
      run += w;
      if (w > 0 && run > target) {
        s_pick = i;
        break;
      }
    }
  }
  __syncthreads();
  return s_pick;
}

}  // namespace mk::cuda
