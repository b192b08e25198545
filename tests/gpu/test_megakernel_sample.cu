// Sampled decoding inside the megakernel (isa.h SampleParams, device/ops/sample.cuh): K steps per launch, each next
// token drawn on the device, must give exactly the tokens of the host loop -- the megakernel's own forward (one greedy
// launch per token, logits to the host) + the host Sampler with the same seed and draw indices -- for 1 and K steps
// per launch, with and without min-p, both publish protocols (flags / counters), all SMs and 7, split attention with
// both (flags: the sampled SPLIT instances, session 17, whose attention is the greedy forward's); the draws must spread
// (> 5 distinct ids). Greedy launches after sampled ones are unchanged. The engine's entry (Backend::decode_sample)
// too. Run: test_gpu --gtest_filter='MegakernelSample*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cuda/backend/device_weights.h"
#include "megakernel_fixture.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/device/sample_probe.h"
#include "megakernel/model.h"
#include "runtime/sampler.h"
#include "../megakernel/mk_test_util.h"

namespace mk::megakernel {
namespace {

SamplingParams params(float t, float min_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = t, p.min_p = min_p, p.seed = seed;
  return p;
}

// After `prompt`: t0 drawn on the host (draw 0); then the host loop of n tokens (draws 1..n) from position P, and the
// device's generate_sample from the same position, steps_per_launch steps per launch, must agree token for token.
void expect_device_equals_host(MegakernelBackend& b, int V, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                               int n, std::initializer_list<int> spls, bool expect_spread) {
  std::vector<float> logits(static_cast<size_t>(V));
  b.truncate(0);
  ASSERT_TRUE(b.forward(prompt, 0, logits).ok());
  Sampler host(sp);
  const int32_t t0 = host.sample(logits, {});
  const int P = int(prompt.size());
  std::vector<int32_t> want;
  int32_t t = t0;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(b.forward(std::span(&t, 1), P + i, logits).ok());
    t = host.sample(logits, {});
    ASSERT_GE(t, 0);
    want.push_back(t);
  }
  if (expect_spread) EXPECT_GT(std::set<int32_t>(want.begin(), want.end()).size(), 5u) << "the draws must spread";
  for (int spl : spls) {
    SCOPED_TRACE(cat("steps per launch ", spl));
    b.truncate(P);
    std::vector<int32_t> got(static_cast<size_t>(n));
    auto st = b.generate_sample(t0, P, sp, 1, got, spl);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got, want);
  }
}

struct Case {
  const char* name;
  ModelConfig c;
};
std::vector<Case> cases() {
  using test::tiny_config;
  return {{"llama hd64 gqa4 vocab 40000", tiny_config(Family::Llama, 8, 2, 64, 200, 344, 3, 40000)},
          {"qwen3 hd128 gqa8 tied vocab 9001", tiny_config(Family::Qwen3, 8, 1, 128, 120, 104, 3, 9001, true)}};
}

TEST(MegakernelSample, KStepsPerLaunchEqualHostLoopBothProtocols) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  uint64_t seed = 70;
  for (const Case& k : cases()) {
    Model m = make_random_model(k.c, DType::BF16, seed);
    for (MegakernelOptions opt : {MegakernelOptions{.flag_publish = 1}, MegakernelOptions{.flag_publish = 0},
                                  MegakernelOptions{.n_sm = 7, .flag_publish = 1},
                                  MegakernelOptions{.n_sm = 7, .attn_chunk_len = 12, .flag_publish = 0},
                                  MegakernelOptions{.n_sm = 7, .attn_chunk_len = 12, .flag_publish = 1}}) {
      auto b = make_mk(m, 64, opt);
      ASSERT_TRUE(b);
      ASSERT_EQ(b->flag_publish(), opt.flag_publish == 1);
      for (float min_p : {0.f, 0.05f}) {
        SCOPED_TRACE(cat(k.name, ", n_sm ", opt.n_sm, ", flags ", opt.flag_publish, ", min_p ", min_p));
        expect_device_equals_host(*b, k.c.n_vocab, prompt, params(min_p > 0 ? 0.7f : 1.f, min_p, seed * 3), 20,
                                  {1, 8, 20}, min_p == 0.f);
      }
      ++seed;
    }
  }
}

// Greedy launches after sampled ones: the same tokens as before any sampling (nothing of the draw leaks into them).
TEST(MegakernelSample, GreedyUnchangedAfterSampledLaunches) {
  const Case k = cases()[1];
  Model m = make_random_model(k.c, DType::BF16, 5);
  for (int flags : {1, 0}) {
    auto b = make_mk(m, 64, {.flag_publish = flags});
    ASSERT_TRUE(b);
    std::vector<int32_t> prompt = {1, 2, 3}, before(12), after(12), sampled(9);
    std::vector<float> logits(static_cast<size_t>(k.c.n_vocab));
    ASSERT_TRUE(b->forward(prompt, 0, logits).ok());
    ASSERT_TRUE(b->generate_greedy(7, 3, before, 4).ok());
    b->truncate(3);
    ASSERT_TRUE(b->generate_sample(7, 3, params(1.f, 0.f, 9), 0, sampled, 9).ok());
    b->truncate(3);
    ASSERT_TRUE(b->generate_greedy(7, 3, after, 12).ok());
    EXPECT_EQ(before, after) << "flags " << flags;
  }
}

// The engine's entry: decode_sample (one launch per chunk) from the Sampler's draw count, refusals for what the
// device does not draw, and a small case for compute-sanitizer.
TEST(MegakernelSample, BackendInterfaceAndRefusals) {
  const ModelConfig c = test::tiny_config(Family::Llama, 4, 4, 64, 136, 96, 2, 3001, true);
  Model m = make_random_model(c, DType::BF16, 11);
  for (int flags : {1, 0}) {
    SCOPED_TRACE(cat("flags ", flags));
    auto b = make_mk(m, 32, {.flag_publish = flags});
    ASSERT_TRUE(b);
    Backend& be = *b;
    const SamplingParams sp = params(0.9f, 0.02f, 4242);
    ASSERT_TRUE(be.can_decode_sample(sp));
    SamplingParams bad = sp;
    bad.top_p = 0.9f;
    EXPECT_FALSE(be.can_decode_sample(bad));
    EXPECT_FALSE(be.decode_sample(1, 0, bad, 0, std::span<int32_t>()).ok());
    bad = sp, bad.repetition_penalty = 1.1f;
    EXPECT_FALSE(be.can_decode_sample(bad));
    EXPECT_FALSE(be.can_decode_sample(params(0.f, 0.f, 1)));
    expect_device_equals_host(*b, c.n_vocab, {9, 8, 7}, sp, 10, {10}, false);
    std::vector<int32_t> chunk(4);
    EXPECT_FALSE(be.decode_sample(1, 0, sp, 0, chunk).ok());  // wrong position: an error, not a launch
  }
  auto no_ring = make_mk(m, 32, {.weight_ring = false, .flag_publish = 0});  // the sampled instances need the ring
  ASSERT_TRUE(no_ring);
  EXPECT_FALSE(no_ring->can_decode_sample(params(1.f, 0.f, 1)));
}

// ---- the draw alone (device/sample_probe.h: the ranges' sums on one block each, then the pick on one) ----
std::vector<int32_t> probe_ids(const std::vector<float>& logits, const SampleParams& sp, int n, bool flags, int part_tiles) {
  auto r = draw_probe(logits, sp, n, flags, part_tiles);
  EXPECT_TRUE(r) << r.message();
  if (!r) return {};
  EXPECT_EQ(r->error, 0u);
  return r->ids;
}

TEST(MegakernelSample, DrawEqualsHostSamplerOnAwkwardLogits) {
  std::mt19937 rng(5);
  int cases = 0;
  for (int V : {1, 5, 127, 128, 129, 1000, 3001, 40000, 128256, 151936})
    for (int special = 0; special < 3; ++special) {  // 1: -inf / NaN / +inf entries (the hint is not finite); 2: spiky
      std::normal_distribution<float> nd(0.f, special == 2 ? 6.f : 2.f);
      std::vector<float> logits(static_cast<size_t>(V));
      for (float& x : logits) x = nd(rng);
      if (special == 1 && V > 8) logits[1] = -INFINITY, logits[V / 2] = NAN, logits[V - 2] = INFINITY, logits[3] = -INFINITY;
      if (special == 1 && V <= 8) logits[0] = -INFINITY;
      for (float T : {0.3f, 1.f, 2.5f})
        for (float min_p : {0.f, 0.05f}) {
          const SampleParams sp{T, min_p, uint64_t(V) * 7 + uint64_t(special), uint64_t(T * 100)};
          const bool flags = (V + special) % 2 == 0;
          // Ranges of 1 tile (up to 1187 of them), 8 (the schedule's at 128256 ids on 132 SMs), 20 (> WARPS tiles).
          const int part_tiles = V % 3 == 0 ? 1 : V % 3 == 1 ? 8 : 20;
          const std::vector<int32_t> got = probe_ids(logits, sp, 12, flags, part_tiles);
          ASSERT_EQ(got.size(), 12u);
          SamplingParams hp;
          hp.temperature = T, hp.min_p = min_p, hp.seed = sp.seed;
          Sampler host(hp);
          host.advance(sp.first_draw);
          for (int d = 0; d < 12; ++d) {
            std::vector<float> l = logits;
            ASSERT_EQ(got[size_t(d)], host.sample(l, {}))
                << "V " << V << " special " << special << " T " << T << " min_p " << min_p << " draw " << d
                << " flags " << flags << " part_tiles " << part_tiles;
          }
          ++cases;
        }
    }
  std::vector<float> none = {-INFINITY, NAN, INFINITY, -INFINITY, NAN};
  EXPECT_EQ(probe_ids(none, SampleParams{1.f, 0.f, 3, 0}, 2, true, 8), std::vector<int32_t>({-1, -1}));
  EXPECT_EQ(probe_ids(none, SampleParams{1.f, 0.f, 3, 0}, 2, false, 1), std::vector<int32_t>({-1, -1}));
  EXPECT_EQ(cases, 180);
}

// The draw's cost at the Llama 3 vocabulary, ranges as the schedule makes them on 132 SMs (printed; bench/RESULTS.md).
TEST(MegakernelSample, DrawTimeAtLlama3Vocabulary) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> logits(128256);
  for (float& x : logits) x = nd(rng);
  const int tiles = (128256 + SAMPLE_TILE - 1) / SAMPLE_TILE, part_tiles = (tiles + 131) / 132;
  for (bool flags : {false, true})
    for (float min_p : {0.f, 0.05f}) {
      auto r = draw_probe(logits, SampleParams{1.f, min_p, 1, 0}, 64, flags, part_tiles);
      ASSERT_TRUE(r) << r.message();
      std::printf("  draw V=128256 T=1 min_p %.2f %s: ranges %.1f us (%d blocks of %d tiles, one launch), pick %.1f us per draw (one SM)\n",
                  min_p, flags ? "flags" : "counters", r->partial_us, r->n_parts, part_tiles, r->pick_us);
    }
}

}  // namespace
}  // namespace mk::megakernel
