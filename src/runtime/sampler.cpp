// Sampler: Hugging Face generate's logits processors and a Philox-seeded draw (see sampler.h for the rule).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/philox.h"
#include "core/thread_pool.h"

namespace mk {

Status validate(const SamplingParams& p) {
  const char* err = sampling_params_error(p);
  if (*err) return make_error("invalid sampling parameter: ", err);
  return {};
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float r) {
  std::vector<int32_t> ids(history.begin(), history.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= logits.size()) continue;
    float& x = logits[size_t(id)];
    x = x > 0.f ? x / r : x * r;  // HF: torch.where(score < 0, score * penalty, score / penalty)
  }
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[size_t(best)])) best = int32_t(i);
  return best;
}

// fn(i) for i in [0, n) over the process's thread pool, for the per-candidate work of a whole vocabulary (exp in
// double, ~6.5 ns each: most of a top-p or temperature request's host time, bench/sampler_bench.cpp). Every element
// gets the value one thread would give it and the sums that follow stay sequential: the results are bit-identical.
template <class F>
static void for_each_candidate(size_t n, F&& fn) {
  ThreadPool::global().parallel_for(int64_t(n), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(size_t(i));
  });
}

static float max_logit(const std::vector<Candidate>& c) {
  float m = -INFINITY;
  for (const auto& x : c) m = std::max(m, x.logit);
  return m;
}

// The k-th largest logit: a size-k min-heap scan for small k (one comparison per rejected candidate),
// nth_element otherwise.
static float kth_largest(const std::vector<Candidate>& c, int k) {
  if (k <= 1024) {
    std::vector<float> heap;  // [k] min-heap of the largest logits seen so far
    heap.reserve(size_t(k));
    for (const auto& x : c) {
      if (heap.size() < size_t(k)) {
        heap.push_back(x.logit);
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      } else if (x.logit > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        heap.back() = x.logit;
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    }
    return heap.front();
  }
  std::vector<float> v(c.size());
  for (size_t i = 0; i < c.size(); ++i) v[i] = c[i].logit;
  std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<>());
  return v[size_t(k - 1)];
}

void filter_top_k(std::vector<Candidate>& c, int k) {
  if (k <= 0 || size_t(k) >= c.size()) return;
  const float kth = kth_largest(c, k);
  // Ties with the k-th value stay (HF removes only scores < the k-th largest).
  std::erase_if(c, [kth](const Candidate& x) { return x.logit < kth; });
}

void filter_top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.size() <= 1) return;
  // The rule: rank by (logit desc, id asc); keep candidate j while the mass ranked before it is < p.
  // Instead of sorting everything, bucket by logit (bin 0 = the top): bins whose cumulative mass stays
  // below p * total are kept whole, bins after the crossing bin are dropped, and only the crossing bin
  // is sorted. Ties share a bin, so the result is the full sort's.
  constexpr int N_BINS = 1024;
  float lmax = -INFINITY, lmin = INFINITY;
  for (const auto& x : c) lmax = std::max(lmax, x.logit), lmin = std::min(lmin, x.logit);
  const double range = double(lmax) - double(lmin);
  thread_local std::vector<uint16_t> bin;  // [c.size()] bin of each candidate
  thread_local std::vector<double> w;      // [c.size()] exp(logit - max)
  bin.resize(c.size());
  w.resize(c.size());
  uint16_t* bin_p = bin.data();  // (the pool's threads have thread_locals of their own: pass this thread's)
  double* w_p = w.data();
  for_each_candidate(c.size(), [&](size_t i) {
    const double d = double(lmax) - double(c[i].logit);
    bin_p[i] = uint16_t(range > 0 ? std::min(N_BINS - 1, int(d / range * N_BINS)) : 0);
    w_p[i] = std::exp(-d);
  });
  std::vector<double> bin_mass(N_BINS, 0.0);
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    total += w[i];
    bin_mass[bin[i]] += w[i];
  }
  const double target = double(p) * total;
  int cross = 0;
  double mass_before = 0;  // mass of the bins before `cross`
  while (cross < N_BINS - 1 && mass_before + bin_mass[size_t(cross)] < target) mass_before += bin_mass[size_t(cross++)];
  // Kept bins first, then the crossing bin (ranked), the rest dropped.
  std::vector<Candidate> kept, crossing;
  for (size_t i = 0; i < c.size(); ++i) {
    if (bin[i] < cross) kept.push_back(c[i]);
    else if (bin[i] == cross) crossing.push_back(c[i]);
  }
  std::sort(crossing.begin(), crossing.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  for (const auto& x : crossing) {
    if (mass_before >= target && !kept.empty()) break;  // the prefix already reaches p
    kept.push_back(x);
    mass_before += std::exp(double(x.logit) - double(lmax));
  }
  c.swap(kept);
}

void filter_min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.f || c.empty()) return;
  // prob / max prob = exp(logit - max logit) >= p  <=>  logit >= max logit + log(p); the max always stays.
  const double cut = double(max_logit(c)) + std::log(double(p));
  std::erase_if(c, [cut](const Candidate& x) { return double(x.logit) < cut; });
}

int32_t draw_candidate(std::vector<Candidate>& c, double u) {
  if (c.empty()) return -1;
  auto by_id = [](const Candidate& a, const Candidate& b) { return a.id < b.id; };
  if (!std::is_sorted(c.begin(), c.end(), by_id)) std::sort(c.begin(), c.end(), by_id);
  const double lmax = max_logit(c);
  thread_local std::vector<double> w;  // [c.size()] exp(logit - max), kept between calls (no reallocation)
  w.resize(c.size());
  double* w_p = w.data();  // (the pool's threads have thread_locals of their own: pass this thread's)
  for_each_candidate(c.size(), [&](size_t i) { w_p[i] = std::exp(double(c[i].logit) - lmax); });
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) total += w[i];
  const double target = u * total;
  double run = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    run += w[i];
    if (run > target) return c[i].id;
  }
  return c.back().id;  // u * total rounded up to total
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  if (params_.repetition_penalty != 1.f) apply_repetition_penalty(logits, history, params_.repetition_penalty);
  if (params_.greedy()) return argmax(logits);
  return draw_filtered(logits, params_, philox_uniform(params_.seed, n_draws_++), scratch_);
}

int32_t draw_filtered(std::span<const float> logits, const SamplingParams& p, double u, std::vector<Candidate>& c) {
  // Temperature on logits shifted by their max: softmax and every filter are shift-invariant, and a tiny
  // temperature cannot overflow to +inf. Non-finite logits are never candidates.
  float lmax = -INFINITY;
  for (float x : logits)
    if (std::isfinite(x)) lmax = std::max(lmax, x);
  c.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = (logits[i] - lmax) / p.temperature;
    if (std::isfinite(x)) c.push_back({x, int32_t(i)});
  }
  if (c.empty()) return -1;
  filter_top_k(c, p.top_k);
  filter_top_p(c, p.top_p);
  filter_min_p(c, p.min_p);
  return draw_candidate(c, u);
}

}  // namespace mk
