// Sampler: Hugging Face generate's logits processors and a Philox-seeded draw (see sampler.h for the rule).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "runtime/philox.h"

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

static float max_logit(const std::vector<Candidate>& c) {
  float m = -INFINITY;
  for (const auto& x : c) m = std::max(m, x.logit);
  return m;
}

void filter_top_k(std::vector<Candidate>& c, int k) {
  if (k <= 0 || size_t(k) >= c.size()) return;
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(),
                   [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
  const float kth = c[size_t(k - 1)].logit;
  // Ties with the k-th value stay (HF removes only scores < the k-th largest).
  std::erase_if(c, [kth](const Candidate& x) { return x.logit < kth; });
}

void filter_top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.size() <= 1) return;
  const double lmax = max_logit(c);
  double total = 0;
  for (const auto& x : c) total += std::exp(double(x.logit) - lmax);
  const double target = double(p) * total;
  auto desc = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  // Sort only as much of the head as needed: the nucleus is usually small.
  for (size_t m = std::min<size_t>(c.size(), 64);; m = std::min(c.size(), 2 * m)) {
    std::partial_sort(c.begin(), c.begin() + ptrdiff_t(m), c.end(), desc);
    double mass_before = 0;  // probability mass of the candidates ranked before j (unnormalised)
    for (size_t j = 0; j < m; ++j) {
      if (mass_before >= target && j > 0) {  // j is not needed: the prefix already reaches p
        c.resize(j);
        return;
      }
      mass_before += std::exp(double(c[j].logit) - lmax);
    }
    if (m == c.size()) return;
  }
}

void filter_min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.f || c.empty()) return;
  const double lmax = max_logit(c);
  // prob / max prob = exp(logit - max logit); the max itself always stays (ratio 1 >= p).
  std::erase_if(c, [&](const Candidate& x) { return std::exp(double(x.logit) - lmax) < double(p); });
}

int32_t draw_candidate(std::vector<Candidate>& c, double u) {
  if (c.empty()) return -1;
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  const double lmax = max_logit(c);
  double total = 0;
  for (const auto& x : c) total += std::exp(double(x.logit) - lmax);
  const double target = u * total;
  double run = 0;
  for (const auto& x : c) {
    run += std::exp(double(x.logit) - lmax);
    if (run > target) return x.id;
  }
  return c.back().id;  // u * total rounded up to total
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  if (params_.repetition_penalty != 1.f) apply_repetition_penalty(logits, history, params_.repetition_penalty);
  if (params_.greedy()) return argmax(logits);
  // Temperature on logits shifted by their max: softmax and every filter are shift-invariant, and a tiny
  // temperature cannot overflow to +inf. Non-finite logits are never candidates.
  float lmax = -INFINITY;
  for (float x : logits)
    if (std::isfinite(x)) lmax = std::max(lmax, x);
  scratch_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = (logits[i] - lmax) / params_.temperature;
    if (std::isfinite(x)) scratch_.push_back({x, int32_t(i)});
  }
  if (scratch_.empty()) return -1;
  filter_top_k(scratch_, params_.top_k);
  filter_top_p(scratch_, params_.top_p);
  filter_min_p(scratch_, params_.min_p);
  return draw_candidate(scratch_, philox_uniform(params_.seed, n_draws_++));
}

}  // namespace mk
