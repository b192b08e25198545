// sample_draw (sim.h): the host Sampler's draw (runtime/sampler.cpp Sampler::sample with top_k 0, top_p 1, no
// repetition penalty) written out step by step in the same arithmetic, for the simulator's sampled launches. The
// megakernel's device draw (device/ops/sample.cuh) is checked against the host Sampler on the GPU; this one against
// it on the CPU (tests/megakernel/test_sim_sample.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "megakernel/sim.h"

namespace mk::megakernel {

int32_t sample_draw(const float* logits, int n, const SampleParams& sp, uint64_t draw) {
  // Candidates (l - max finite l) / T in float; non-finite ones dropped.
  float lmax = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (std::isfinite(logits[i])) lmax = std::max(lmax, logits[i]);
  std::vector<float> x;    // [kept] candidate logits, ascending id
  std::vector<int32_t> id; // [kept]
  for (int i = 0; i < n; ++i) {
    const float v = (logits[i] - lmax) / sp.temperature;
    if (std::isfinite(v)) x.push_back(v), id.push_back(i);
  }
  if (x.empty()) return -1;
  float cmax = -INFINITY;  // the largest candidate (0 unless the temperature overflowed the others)
  for (float v : x) cmax = std::max(cmax, v);
  // min-p: keep prob >= min_p * max prob, i.e. x >= max x + log(min_p).
  if (sp.min_p > 0.f) {
    const double cut = double(cmax) + std::log(double(sp.min_p));
    size_t k = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (double(x[i]) >= cut) x[k] = x[i], id[k] = id[i], ++k;
    x.resize(k), id.resize(k);
  }
  // The draw: weights exp(x - max) in double walked in ascending id order; the first whose running sum exceeds
  // u * total; the last if none does (u * total rounded up to total).
  double kmax = -INFINITY;
  for (float v : x) kmax = std::max(kmax, double(v));
  std::vector<double> w(x.size());
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) total += w[i] = std::exp(double(x[i]) - kmax);
  const double target = philox_uniform(sp.seed, draw) * total;
  double run = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    run += w[i];
    if (run > target) return id[i];
  }
  return id.back();
}

}  // namespace mk::megakernel
