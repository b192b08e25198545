// The on-device sampler (src/cuda/ops/sample.cuh, sample_select.cuh) against the host Sampler (runtime/sampler.cpp) on
// random logits: the same id for every (temperature, top-k, top-p, min-p, seed, draw) from one block and from grids of
// 7 and 64 blocks, at vocabulary sizes from tiny to Llama 3's and odd ones, with NaN and infinite entries, peaked and
// flat distributions, and logits rounded to a grid so that many candidates tie at the top-k / top-p boundaries, with a
// fresh scratch per draw and one scratch reused over hundreds (as the backend draws). The host rule and its statistics
// are tested in tests/runtime/test_sampler.cpp; here only the equality.
// Run: test_gpu --gtest_filter='Sample*'
#include <memory>

#include "core/philox.h"
#include "cuda/ops/sample.h"
#include "gpu_test_util.h"
#include "runtime/sampler.h"

namespace mk::gpu_test {
namespace {

// The host's draw for `rule`. top_k = 1 is greedy in Sampler (an argmax); the device applies the filter as for any k
// (ties of the largest candidate kept and drawn among), so for it the reference is Sampler::sample's draw without the
// greedy shortcut (draw_filtered).
int32_t host_draw(std::vector<float> logits, const cuda::SampleRule& rule, uint64_t seed, uint64_t draw) {
  SamplingParams p;
  p.temperature = rule.temperature;
  p.top_k = rule.top_k;
  p.top_p = rule.top_p;
  p.min_p = rule.min_p;
  p.seed = seed;
  if (!p.greedy()) {
    Sampler host(p);
    host.advance(draw);
    return host.sample(logits, {});
  }
  std::vector<Candidate> c;
  return draw_filtered(logits, p, philox_uniform(seed, draw), c);
}

// Every rule against the host for one row of logits; returns the number of device draws compared.
int compare_rules(const std::vector<float>& logits, const std::vector<cuda::SampleRule>& rules, const char* what) {
  const int V = int(logits.size());
  DeviceArray<float> d(logits);
  DeviceArray<int32_t> out(1);
  int n = 0;
  for (const cuda::SampleRule& r : rules) {
    for (uint64_t seed : {0ull, 99ull}) {
      for (uint64_t draw : {0ull, 1000003ull}) {
        SCOPED_TRACE(cat(what, " V ", V, " T ", r.temperature, " top_k ", r.top_k, " top_p ", r.top_p, " min_p ",
                         r.min_p, " seed ", seed, " draw ", draw));
        const int32_t want = host_draw(logits, r, seed, draw);
        for (int blocks : {1, 7, 64}) {  // block_sample, grid_sample
          out.poison();
          cuda::sample_token(cuda::Stream(nullptr, false), d.p, V, r, seed, draw, out.p, blocks);
          EXPECT_EQ(out.download()[0], want) << blocks << " blocks";
          ++n;
        }
      }
    }
  }
  return n;
}

TEST(Sample, DeviceDrawsEqualHostSampler) {
  std::mt19937 rng(17);
  int n_draws = 0;
  for (int V : {1, 7, 1000, 50257, 128256}) {
    for (float sigma : {0.5f, 3.f, 12.f}) {  // flat .. peaked
      std::vector<float> logits = randn(size_t(V), rng, sigma);
      if (V > 10) logits[size_t(V / 3)] = NAN, logits[size_t(V / 2)] = -INFINITY, logits[size_t(V - 1)] = INFINITY;
      std::vector<cuda::SampleRule> rules;
      for (float T : {0.3f, 1.f, 2.5f})
        for (float min_p : {0.f, 0.05f}) rules.push_back({T, 0, 1.f, min_p});
      n_draws += compare_rules(logits, rules, "temperature + min-p");
    }
  }
  EXPECT_EQ(n_draws, 5 * 3 * 6 * 4 * 3);
}

// Top-k and top-p, alone, together and with min-p: k = 1, small, large and >= the vocabulary; p tiny, typical and
// near 1.
std::vector<cuda::SampleRule> top_rules(int V) {
  return {{1.f, 40, 1.f, 0.f},       {0.7f, 0, 0.9f, 0.f},     {1.f, 50, 0.95f, 0.05f}, {2.5f, 0, 0.999999f, 0.f},
          {1.f, 0, 1e-6f, 0.f},      {0.3f, 1, 1.f, 0.f},      {1.f, V + 5, 0.5f, 0.f}, {1.f, 1000, 1.f, 0.02f},
          {1.3f, 3, 0.6f, 0.f},      {1.f, V / 2 + 1, 0.7f, 0.f}, {0.8f, 0, 0.5f, 0.1f}};
}

TEST(Sample, TopKTopPEqualHostSampler) {
  std::mt19937 rng(23);
  int n_draws = 0;
  for (int V : {1, 7, 1000, 50257, 131071, 128256}) {
    for (float sigma : {0.5f, 3.f, 12.f}) {
      std::vector<float> logits = randn(size_t(V), rng, sigma);
      if (V > 10) logits[size_t(V / 3)] = NAN, logits[size_t(V / 2)] = -INFINITY, logits[size_t(V - 2)] = INFINITY;
      n_draws += compare_rules(logits, top_rules(V), "random");
    }
  }
  EXPECT_EQ(n_draws, 6 * 3 * 11 * 4 * 3);
}

// Logits on a coarse grid: hundreds or thousands of candidates share each value, so the k-th largest and top-p's
// boundary fall inside runs of ties (top-k keeps all of them; top-p the lowest ids up to the mass).
TEST(Sample, TiesAtTheBoundaryEqualHostSampler) {
  std::mt19937 rng(5);
  int n_draws = 0;
  for (int V : {1000, 128256}) {
    for (float step : {0.25f, 1.f}) {
      std::vector<float> logits = randn(size_t(V), rng, 2.f);
      for (float& x : logits) x = std::round(x / step) * step;
      std::vector<cuda::SampleRule> rules = top_rules(V);
      rules.push_back({1.f, 7, 1.f, 0.f});
      rules.push_back({1.f, 0, 0.3f, 0.f});
      rules.push_back({1.f, 100, 0.8f, 0.f});
      n_draws += compare_rules(logits, rules, cat("step ", step).c_str());
    }
  }
  // All equal: top-p keeps the lowest ids (p of them); a tied maximum with top-k 1 or a tiny p.
  std::vector<float> flat(1000, 0.5f);
  n_draws += compare_rules(flat, {{1.f, 0, 0.5f, 0.f}, {1.f, 0, 0.0123f, 0.f}, {1.f, 10, 1.f, 0.f}, {1.f, 1, 1.f, 0.f}},
                           "flat");
  std::vector<float> top2 = randn(777, rng, 1.f);
  top2[100] = top2[600] = 9.f;
  n_draws += compare_rules(top2, {{1.f, 1, 1.f, 0.f}, {0.5f, 0, 1e-4f, 0.f}, {1.f, 2, 1.f, 0.f}}, "two maxima");
  EXPECT_EQ(n_draws, (2 * 2 * 14 + 4 + 3) * 4 * 3);
}

// One grid_sample scratch for `blocks` blocks, zeroed (sample.h grid_sample_scratch_at).
struct Scratch {
  void* base = nullptr;
  cuda::GridSampleScratch sc;
  explicit Scratch(int blocks) {
    const size_t total = cuda::grid_sample_scratch_bytes(blocks);
    CUDA_CHECK(cudaMalloc(&base, total));
    CUDA_CHECK(cudaMemset(base, 0, total));
    sc = cuda::grid_sample_scratch_at(base, blocks);
  }
  ~Scratch() { cudaFree(base); }
};

// Logits whose top-k / top-p boundaries fall in long runs of near or exact ties: nearly flat, exactly flat, and
// coarse ties (each radix level of the selection keeps thousands of candidates).
std::vector<std::vector<float>> long_run_logits(std::mt19937& rng) {
  std::vector<std::vector<float>> out;
  out.push_back(randn(128256, rng, 1e-4f, 0.5f));   // all within ~1e-3 of each other
  out.push_back(std::vector<float>(131071, -2.f));  // all equal
  std::vector<float> c = randn(128256, rng, 0.3f);
  for (float& x : c) x = std::round(x / 0.125f) * 0.125f;  // ~10k ties per value
  out.push_back(c);
  return out;
}

// The backend's way of drawing: one scratch reused draw after draw (the grid draw must leave its ticket, barrier
// and histograms ready for the next draw), rules and vocabularies changing between draws, 7 and 64 blocks; every
// draw equal to the host Sampler's.
TEST(Sample, ReusedScratchEqualsHostSampler) {
  std::mt19937 rng(41);
  std::vector<std::vector<float>> rows;
  for (int V : {7, 1000, 50257, 128256, 131071})
    for (float sigma : {0.9f, 3.f, 12.f}) rows.push_back(randn(size_t(V), rng, sigma));
  for (auto& r : long_run_logits(rng)) rows.push_back(r);
  const std::vector<cuda::SampleRule> rules = {
      {1.f, 0, 1.f, 0.f},  {1.f, 0, 0.9f, 0.f}, {1.f, 40, 1.f, 0.f},    {0.7f, 40, 0.95f, 0.05f}, {1.f, 1, 1.f, 0.f},
      {1.f, 0, 1e-6f, 0.f}, {1.f, 0, 0.999999f, 0.f}, {0.6f, 0, 1.f, 0.1f}, {1.f, 100000, 0.5f, 0.f}};
  std::vector<int32_t> want;  // [pass][row][rule], draw index = position
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& row : rows)
      for (const cuda::SampleRule& r : rules) want.push_back(host_draw(row, r, 7, want.size()));
  std::vector<std::unique_ptr<DeviceArray<float>>> d;
  for (const auto& row : rows) d.push_back(std::make_unique<DeviceArray<float>>(row));
  int n = 0;
  for (int blocks : {7, 64}) {
    Scratch scratch(blocks);
    DeviceArray<int32_t> out(1);
    uint64_t draw = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t row = 0; row < rows.size(); ++row) {
        const int V = int(rows[row].size());
        for (const cuda::SampleRule& r : rules) {
          SCOPED_TRACE(cat("blocks ", blocks, " V ", V, " row ", row, " T ", r.temperature, " top_k ", r.top_k,
                           " top_p ", r.top_p, " min_p ", r.min_p, " draw ", draw));
          out.poison();
          cuda::sample_token(cuda::Stream(nullptr, false), d[row]->p, V, r, 7, draw, out.p, blocks, scratch.sc);
          EXPECT_EQ(out.download()[0], want[draw]);
          ++draw, ++n;
        }
      }
    }
  }
  EXPECT_EQ(n, 2 * 2 * 18 * 9);
}

// The long-run logits through the fresh-scratch launcher too, with the rules of the other tests.
TEST(Sample, LongRunsOfTiesEqualHostSampler) {
  std::mt19937 rng(43);
  int n_draws = 0;
  for (auto& row : long_run_logits(rng)) n_draws += compare_rules(row, top_rules(int(row.size())), "long runs");
  EXPECT_EQ(n_draws, 3 * 11 * 4 * 3);
}

TEST(Sample, NoFiniteLogitIsMinusOne) {
  DeviceArray<float> d(std::vector<float>{NAN, -INFINITY, INFINITY, NAN});
  DeviceArray<int32_t> out(1);
  for (const cuda::SampleRule& r : {cuda::SampleRule{1.f, 0, 1.f, 0.f}, cuda::SampleRule{1.f, 2, 0.5f, 0.f}}) {
    for (int blocks : {1, 3}) {
      out.poison();
      cuda::sample_token(cuda::Stream(nullptr, false), d.p, 4, r, 5, 0, out.p, blocks);
      EXPECT_EQ(out.download()[0], -1) << blocks << " blocks, top_k " << r.top_k;
    }
  }
}

}  // namespace
}  // namespace mk::gpu_test
