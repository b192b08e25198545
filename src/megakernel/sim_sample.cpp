// sample_draw (sim.h): the host Sampler's draw (runtime/sampler.cpp Sampler::sample with top_k 0, top_p 1, no
// repetition penalty) written out step by step in the same arithmetic, for the simulator's sampled launches. The
// megakernel's device draw (device/ops/sample.cuh) is checked against the host Sampler on the GPU; this one against
// it on the CPU (tests/megakernel/test_sim_sample.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "megakernel/isa.h"
#include "megakernel/sim.h"

namespace mk::megakernel {

int32_t sample_draw(const float* logits, int n, const SampleParams& sp, uint64_t draw) {
  // Candidates (l - max finite l) / T in float; non-finite ones dropped.
  const float lmax = sample_max(logits, n);
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

// ---- the megakernel's two-stage draw (sim.h), mirroring device/ops/sample.cuh step for step ----
namespace {

// A candidate's weight (the device's Rule): x = (l - m) / T in float, kept when finite and >= log(min_p).
double weight(float l, float m, const SampleParams& sp, bool& kept) {
  const float x = (l - m) / sp.temperature;
  const double cut = sp.min_p > 0.f ? std::log(double(sp.min_p)) : -INFINITY;
  kept = std::isfinite(x) && double(x) >= cut;
  return kept ? std::exp(double(x)) : 0.0;
}

// The device's inclusive warp scan (sample.cuh warp_scan) over 32 lanes' values, in place: at offset o, lane l >= o
// adds lane l - o's value of the level before.
void warp_scan32(double (&v)[32]) {
  for (int o = 1; o < 32; o <<= 1) {
    double prev[32];
    std::copy(v, v + 32, prev);
    for (int l = o; l < 32; ++l) v[l] = prev[l] + prev[l - o];
  }
}

// One tile from id i0: each lane's 4 weights summed in order, then the warp's inclusive scan over the 32 lanes.
struct Tile {
  double w[32][4];
  bool keep[32][4];
  double s[32];     // each lane's own sum
  double incl[32];
  int32_t kept = -1;
};
Tile tile_at(const float* logits, int n, int i0, float m, const SampleParams& sp) {
  Tile t;
  for (int l = 0; l < 32; ++l) {
    double s = 0;
    for (int j = 0; j < 4; ++j) {
      const int i = i0 + 4 * l + j;
      bool kept = false;
      t.w[l][j] = i < n ? weight(logits[i], m, sp, kept) : 0.0;
      t.keep[l][j] = kept;
      s += t.w[l][j];
      if (kept) t.kept = i;
    }
    t.s[l] = t.incl[l] = s;
  }
  warp_scan32(t.incl);
  return t;
}

}  // namespace

float sample_max(const float* logits, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (std::isfinite(logits[i])) m = std::max(m, logits[i]);
  return m;
}

SamplePart sample_part_sum(const float* logits, int n, int r0, int r1, float m, const SampleParams& sp) {
  SamplePart p;
  for (int i0 = r0; i0 < r1; i0 += SAMPLE_TILE) {
    const Tile t = tile_at(logits, n, i0, m, sp);
    p.sum += t.incl[31];
    p.kept = std::max(p.kept, t.kept);
  }
  return p;
}

int sample_pick_part(const std::vector<SamplePart>& parts, const SampleParams& sp, uint64_t draw, double* t) {
  // Inclusive prefix sums in chunks of 32 ranges (the device's warp 0: a chunk's scan plus the carry).
  std::vector<double> incl(parts.size());
  double carry = 0;
  for (size_t base = 0; base < parts.size(); base += 32) {
    double v[32] = {};
    for (size_t l = 0; l < 32 && base + l < parts.size(); ++l) v[l] = parts[base + l].sum;
    warp_scan32(v);
    for (size_t l = 0; l < 32 && base + l < parts.size(); ++l) incl[base + l] = carry + v[l];
    carry = carry + v[31];
  }
  if (incl.empty()) return -1;
  const double target = philox_uniform(sp.seed, draw) * incl.back();
  for (size_t k = 0; k < incl.size(); ++k)
    if (incl[k] > target) {
      *t = target - (k == 0 ? 0.0 : incl[k - 1]);
      return int(k);
    }
  return -1;
}

int32_t sample_pick_in_part(const float* logits, int n, int r0, int r1, float m, const SampleParams& sp, double t,
                            int32_t part_kept) {
  double r = 0;
  for (int i0 = r0; i0 < r1; i0 += SAMPLE_TILE) {
    const Tile tl = tile_at(logits, n, i0, m, sp);
    if (!(r + tl.incl[31] > t)) {
      r += tl.incl[31];
      continue;
    }
    for (int l = 0; l < 32; ++l) {  // the first lane whose running sum passes t walks its 4 ids
      if (!(tl.s[l] > 0 && r + tl.incl[l] > t)) continue;
      double rr = r + (l == 0 ? 0.0 : tl.incl[l - 1]);
      int32_t lane_kept = -1;
      for (int j = 0; j < 4; ++j) {
        rr += tl.w[l][j];
        if (tl.keep[l][j]) lane_kept = i0 + 4 * l + j;
        if (tl.w[l][j] > 0 && rr > t) return i0 + 4 * l + j;
      }
      return lane_kept;  // the lane's sum passed t, its own walk fell short by a rounding step
    }
    return tl.kept;  // the tile's sum passed t, no lane's did (a rounding step)
  }
  return part_kept;  // the range's sum passed t, the walk's did not (a rounding step)
}

}  // namespace mk::megakernel
