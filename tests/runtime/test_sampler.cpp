// Sampler tests: Philox known answers, each filter on tiny vocabularies against an independent
// computation (HF's formulation), the draw distribution against softmax over many seeded draws, and
// determinism per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "core/philox.h"
#include "runtime/sampler.h"

namespace mk {
namespace {

std::vector<Candidate> all_candidates(const std::vector<float>& logits) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({logits[i], int32_t(i)});
  return c;
}

std::set<int32_t> ids_of(const std::vector<Candidate>& c) {
  std::set<int32_t> s;
  for (const auto& x : c) s.insert(x.id);
  return s;
}

std::vector<double> softmax(const std::vector<float>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(double(l[i]) - m);
  for (auto& x : p) x /= z;
  return p;
}

std::vector<float> random_logits(std::mt19937& rng, int n, float scale) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = d(rng);
  return l;
}

TEST(Philox, KnownAnswers) {  // Random123's kat_vectors for philox4x32 with 10 rounds
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (Philox4x32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (Philox4x32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Philox4x32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformMoments) {
  const int n = 200000;
  double sum = 0, sum2 = 0, lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    const double u = philox_uniform(12345, uint64_t(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(sum2 / n - (sum / n) * (sum / n), 1.0 / 12, 2e-3);
  EXPECT_LT(lo, 1e-4);
  EXPECT_GT(hi, 1 - 1e-4);
  EXPECT_NE(philox_uniform(1, 0), philox_uniform(2, 0));
  EXPECT_NE(philox_uniform(1ull << 32, 0), philox_uniform(0, 0));  // high seed bits matter
}

TEST(Sampler, ArgmaxLowestIdOnTiesAndSkipsNan) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN, -1, NAN}), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN}), -1);
  EXPECT_EQ(argmax(std::vector<float>{-INFINITY, -INFINITY}), 0);
}

TEST(Sampler, RepetitionPenaltyHandChecked) {
  std::vector<float> l{2.f, -2.f, 1.f, 0.5f, 0.f};
  const std::vector<int32_t> hist{0, 1, 1, 1, 4, 99, -3};  // repeats count once; out-of-range ignored
  apply_repetition_penalty(l, hist, 2.f);
  EXPECT_EQ(l, (std::vector<float>{1.f, -4.f, 1.f, 0.5f, 0.f}));
  // Greedy sees the penalty: token 0 (logit 2) loses to token 2 once penalised.
  SamplingParams p;
  p.repetition_penalty = 3.f;
  Sampler s(p);
  std::vector<float> l2{2.f, -2.f, 1.f};
  const std::vector<int32_t> h2{0};
  EXPECT_EQ(s.sample(l2, h2), 2);
  // So greedy with a penalty is not the raw logits' argmax: not for a device argmax (SamplingParams::argmax_only).
  EXPECT_TRUE(p.greedy());
  EXPECT_FALSE(p.argmax_only());
  EXPECT_TRUE(SamplingParams{}.argmax_only());
  EXPECT_TRUE((SamplingParams{.temperature = 0.8f, .top_k = 1}.argmax_only()));
  EXPECT_FALSE((SamplingParams{.temperature = 0.8f}.argmax_only()));
}

TEST(Sampler, TopKKeepsTies) {
  auto c = all_candidates({0.5f, 3.f, 1.f, 3.f, 1.f, -2.f});
  filter_top_k(c, 3);
  EXPECT_EQ(ids_of(c), (std::set<int32_t>{1, 3, 2, 4}));  // 3rd largest is 1.0, both 1.0s stay
  auto d = all_candidates({0.5f, 3.f, 1.f});
  filter_top_k(d, 1);
  EXPECT_EQ(ids_of(d), (std::set<int32_t>{1}));
  auto e = all_candidates({0.5f, 3.f});
  filter_top_k(e, 5);  // k >= size: no-op
  EXPECT_EQ(e.size(), 2u);
}

TEST(Sampler, TopPHandChecked) {
  const std::vector<float> l{std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto c = all_candidates(l);
  filter_top_p(c, 0.79f);  // 0.5 < 0.79, 0.5 + 0.3 >= 0.79
  EXPECT_EQ(ids_of(c), (std::set<int32_t>{1, 3}));
  c = all_candidates(l);
  filter_top_p(c, 0.81f);
  EXPECT_EQ(ids_of(c), (std::set<int32_t>{1, 3, 0}));
  c = all_candidates(l);
  filter_top_p(c, 0.1f);  // always at least the top token
  EXPECT_EQ(ids_of(c), (std::set<int32_t>{1}));
}

// HF TopPLogitsWarper, written independently: sort ascending, cumulative softmax, drop cum <= 1 - p.
std::set<int32_t> hf_top_p(const std::vector<float>& l, float top_p) {
  const auto p = softmax(l);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] < l[size_t(b)]; });
  std::set<int32_t> keep;
  double cum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cum += p[size_t(order[i])];
    if (cum > 1.0 - top_p || i + 1 == order.size()) keep.insert(order[i]);
  }
  return keep;
}

TEST(Sampler, TopPMatchesHfFormulationOnRandomVocabs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 300);  // crosses the 64-candidate first pass
    const auto l = random_logits(rng, n, trial % 2 ? 0.3f : 3.f);
    const float top_p = std::uniform_real_distribution<float>(0.05f, 0.99f)(rng);
    auto c = all_candidates(l);
    filter_top_p(c, top_p);
    EXPECT_EQ(ids_of(c), hf_top_p(l, top_p)) << "trial " << trial << " n " << n << " p " << top_p;
  }
}

// The rule written as a full sort: rank by (logit desc, id asc), keep j while the mass before it is < p.
std::set<int32_t> full_sort_top_p(const std::vector<float>& l, float top_p) {
  const auto p = softmax(l);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
  });
  std::set<int32_t> keep;
  double before = 0;
  for (size_t j = 0; j < order.size() && (j == 0 || before < top_p); ++j) {
    keep.insert(order[j]);
    before += p[size_t(order[j])];
  }
  return keep;
}

TEST(Sampler, TopPWithTiesAndLargeVocabsMatchesFullSort) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = trial % 3 == 0 ? 20000 : 1 + int(rng() % 3000);
    auto l = random_logits(rng, n, trial % 2 ? 1.f : 4.f);
    if (trial % 4 < 2)
      for (auto& x : l) x = std::round(x * 2.f) / 2.f;  // many exact ties, also at the cut
    const float top_p = std::uniform_real_distribution<float>(0.05f, 0.999f)(rng);
    auto c = all_candidates(l);
    filter_top_p(c, top_p);
    EXPECT_EQ(ids_of(c), full_sort_top_p(l, top_p)) << "trial " << trial << " n " << n << " p " << top_p;
  }
  auto same = all_candidates(std::vector<float>(10, 1.5f));  // all equal: the lowest ids are ranked first
  filter_top_p(same, 0.25f);
  EXPECT_EQ(ids_of(same), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, MinPMatchesDefinition) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 50);
    const auto l = random_logits(rng, n, 2.f);
    const float min_p = std::uniform_real_distribution<float>(0.01f, 0.9f)(rng);
    const auto p = softmax(l);
    const double pmax = *std::max_element(p.begin(), p.end());
    std::set<int32_t> want;
    for (int i = 0; i < n; ++i)
      if (p[size_t(i)] >= min_p * pmax) want.insert(i);
    auto c = all_candidates(l);
    filter_min_p(c, min_p);
    EXPECT_EQ(ids_of(c), want) << "trial " << trial;
  }
}

TEST(Sampler, DrawRuleIsInverseCdfInIdOrder) {
  // probs 0.25, 0.5, 0.25 over ids 4, 7, 9 (given out of order)
  std::vector<Candidate> c{{std::log(0.5f), 7}, {std::log(0.25f), 9}, {std::log(0.25f), 4}};
  EXPECT_EQ(draw_candidate(c, 0.0), 4);
  EXPECT_EQ(draw_candidate(c, 0.24), 4);
  EXPECT_EQ(draw_candidate(c, 0.26), 7);
  EXPECT_EQ(draw_candidate(c, 0.74), 7);
  EXPECT_EQ(draw_candidate(c, 0.76), 9);
  EXPECT_EQ(draw_candidate(c, 0.999999), 9);
  std::vector<Candidate> none;
  EXPECT_EQ(draw_candidate(none, 0.5), -1);
}

// Frequencies of `n_draws` draws vs the expected distribution: each within 5 standard deviations.
void expect_distribution(const SamplingParams& params, const std::vector<float>& logits,
                         const std::vector<double>& want, int n_draws) {
  Sampler s(params);
  std::vector<int> count(logits.size());
  for (int i = 0; i < n_draws; ++i) {
    auto l = logits;
    const int32_t id = s.sample(l, {});
    ASSERT_GE(id, 0);
    ASSERT_LT(size_t(id), logits.size());
    ++count[size_t(id)];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double f = double(count[i]) / n_draws;
    const double sd = std::sqrt(want[i] * (1 - want[i]) / n_draws);
    if (want[i] == 0) EXPECT_EQ(count[i], 0) << "token " << i << " was filtered out";
    else EXPECT_NEAR(f, want[i], 5 * sd + 1e-9) << "token " << i;
  }
}

TEST(Sampler, DrawsFollowSoftmaxWithTemperature) {
  std::mt19937 rng(3);
  const auto l = random_logits(rng, 12, 1.5f);
  for (float t : {0.5f, 1.f, 2.f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 1000 + uint64_t(t * 10);
    std::vector<float> scaled(l.size());
    for (size_t i = 0; i < l.size(); ++i) scaled[i] = l[i] / t;
    expect_distribution(p, l, softmax(scaled), 100000);
  }
}

TEST(Sampler, DrawsFollowRenormalisedFilteredSoftmax) {
  // logits of probs .4 .25 .15 .1 .06 .04; top_k=4 then top_p=0.85 of the renormalised 4 (.4/.9 ...):
  // cum .444, .722, .889 -> keeps ids 0,1,2; then min_p=0.3: .15/.4 = .375 >= .3 keeps all three.
  const std::vector<float> l{std::log(.4f), std::log(.25f), std::log(.15f), std::log(.1f), std::log(.06f),
                             std::log(.04f)};
  SamplingParams p;
  p.temperature = 1.f;
  p.top_k = 4;
  p.top_p = 0.85f;
  p.min_p = 0.3f;
  p.seed = 99;
  expect_distribution(p, l, {.4 / .8, .25 / .8, .15 / .8, 0, 0, 0}, 100000);
  p.min_p = 0.5f;  // .25/.4 = .625 stays, .15/.4 = .375 goes
  expect_distribution(p, l, {.4 / .65, .25 / .65, 0, 0, 0, 0}, 100000);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  std::mt19937 rng(5);
  const auto l = random_logits(rng, 1000, 2.f);
  auto run = [&](uint64_t seed, int n) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      auto x = l;
      out.push_back(s.sample(x, out));
    }
    return out;
  };
  EXPECT_EQ(run(42, 64), run(42, 64));
  EXPECT_NE(run(42, 64), run(43, 64));
  // reset() restarts the stream
  SamplingParams p;
  p.temperature = 1.f;
  p.seed = 8;
  Sampler s(p);
  auto a = l, b = l;
  const int32_t first = s.sample(a, {});
  s.reset();
  EXPECT_EQ(s.sample(b, {}), first);
  EXPECT_EQ(s.n_draws(), 1u);
}

TEST(Sampler, TinyTemperatureIsNearGreedyAndNeverFails) {
  SamplingParams p;
  p.temperature = 1e-30f;
  Sampler s(p);
  std::vector<float> l{1.f, 5.f, 4.99f, -3.f};
  EXPECT_EQ(s.sample(l, {}), 1);
  std::vector<float> inf{-INFINITY, NAN, -INFINITY};
  EXPECT_EQ(s.sample(inf, {}), -1);
}

TEST(Sampler, ValidateNamesTheParameter) {
  SamplingParams p;
  EXPECT_TRUE(validate(p).ok());
  p.top_p = 0.f;
  EXPECT_NE(validate(p).message().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1.f;
  EXPECT_NE(validate(p).message().find("temperature"), std::string::npos);
  p = {};
  p.min_p = 1.5f;
  EXPECT_NE(validate(p).message().find("min_p"), std::string::npos);
  p = {};
  p.repetition_penalty = 0.f;
  EXPECT_NE(validate(p).message().find("repetition_penalty"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(validate(p).message().find("top_k"), std::string::npos);
  p = {};
  p.temperature = NAN;
  EXPECT_FALSE(validate(p).ok());
}

}  // namespace
}  // namespace mk
