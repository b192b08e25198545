// The megakernel's stop check on the device (isa.h StopIds, issue 5): a decode whose step j chooses a stop id (the
// first step that chooses it) returns exactly the first j + 1 tokens of the decode without stop ids, the rest -1, and
// caches exactly the fed positions: a following decode that feeds the stop token equals the reference's continuation
// (which also proves the counters, the step barrier and the LM-head claim counter stand where the next launch expects
// them -- else it would time out or diverge). Greedy and sampled; flags and counters; all SMs and 7 with split
// attention (both protocols); one launch (K = 12), K = 1 and K = 5 steps per launch (a stop in an earlier launch makes the later ones
// run nothing); stop at the very first token; stop ids that never occur: unchanged. The engine's entry
// (decode_*_until) too. Run: test_gpu --gtest_filter='MegakernelStop*' (MegakernelStop.Small under compute-sanitizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "megakernel_fixture.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::megakernel {
namespace {

constexpr int K = 12;
const std::vector<int32_t> PROMPT = {3, 14, 15, 92, 65};

// The steps j whose token occurs there first.
std::vector<int> first_occurrences(const std::vector<int32_t>& t) {
  std::vector<int> js;
  for (int j = 0; j < int(t.size()); ++j)
    if (std::find(t.begin(), t.begin() + j, t[size_t(j)]) == t.begin() + j) js.push_back(j);
  return js;
}

// One backend, one sampling mode: reference, then stops at steps js with each steps-per-launch, then continuations.
void check_stops(MegakernelBackend& b, int V, const SampleParams& sp, std::initializer_list<int> spls, bool all_js) {
  std::vector<float> logits(static_cast<size_t>(V));
  b.truncate(0);
  ASSERT_TRUE(b.forward(PROMPT, 0, logits).ok());
  const int32_t t0 = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const int P = int(PROMPT.size());
  std::vector<int32_t> ref(K);
  auto n = b.generate_until(t0, P, ref, K, sp, {});
  ASSERT_TRUE(n.ok()) << n.message();
  ASSERT_EQ(*n, K);
  // Stop ids that never occur (outside the vocabulary, negative): all K tokens, the same ones.
  const int32_t never[] = {V, V + 100, -1};
  for (int spl : spls) {
    b.truncate(P);
    std::vector<int32_t> got(K);
    auto m = b.generate_until(t0, P, got, spl, sp, never);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ(*m, K);
    EXPECT_EQ(got, ref) << "steps per launch " << spl;
  }
  const std::vector<int> js = first_occurrences(ref);
  std::vector<int> test_js = all_js ? js : std::vector<int>{js.front(), js.back()};
  test_js.erase(std::unique(test_js.begin(), test_js.end()), test_js.end());
  for (int j : test_js)
    for (int spl : spls) {
      SCOPED_TRACE(cat("stop at step ", j, ", steps per launch ", spl));
      b.truncate(P);
      const int32_t stop[] = {V + 7, ref[size_t(j)]};
      std::vector<int32_t> got(K, -9);
      auto m = b.generate_until(t0, P, got, spl, sp, stop);
      ASSERT_TRUE(m.ok()) << m.message();
      ASSERT_EQ(*m, j + 1);
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + j + 1, ref.begin()));
      EXPECT_TRUE(std::all_of(got.begin() + j + 1, got.end(), [](int32_t t) { return t == -1; }));
      if (j + 1 == K) continue;
      // The cache holds P + j + 1 positions: feed the stop token there and continue (draws on from j + 1).
      SampleParams next = sp;
      next.first_draw += uint64_t(j + 1);
      std::vector<int32_t> rest(size_t(K - j - 1));
      auto r = b.generate_until(ref[size_t(j)], P + j + 1, rest, K, next, {});
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ref.begin() + j + 1));
    }
}

struct Case {
  const char* name;
  ModelConfig c;
};

TEST(MegakernelStop, StopAtStepJEqualsPrefixAndContinues) {
  using test::tiny_config;
  const Case cases[] = {{"llama hd64 gqa4 vocab 3001", tiny_config(Family::Llama, 8, 2, 64, 200, 344, 3, 3001)},
                        {"qwen3 hd128 gqa8 tied vocab 9001", tiny_config(Family::Qwen3, 8, 1, 128, 120, 104, 3, 9001, true)}};
  uint64_t seed = 90;
  for (const Case& k : cases) {
    Model m = make_random_model(k.c, DType::BF16, seed++);
    for (MegakernelOptions opt : {MegakernelOptions{.flag_publish = 1}, MegakernelOptions{.flag_publish = 0},
                                  MegakernelOptions{.n_sm = 7, .attn_chunk_len = 12, .flag_publish = 0},
                                  MegakernelOptions{.n_sm = 7, .attn_chunk_len = 12, .flag_publish = 1},
                                  MegakernelOptions{.n_sm = 7, .flag_publish = 1, .lm_dynamic = false}}) {
      auto b = make_mk(m, 64, opt);
      ASSERT_TRUE(b);
      for (float temp : {0.f, 1.5f}) {
        SCOPED_TRACE(cat(k.name, ", flags ", b->flag_publish(), ", n_sm ", opt.n_sm, temp > 0.f ? ", sampled" : ", greedy"));
        check_stops(*b, k.c.n_vocab, SampleParams{temp, 0.f, seed * 11, 1}, {K, 1, 5}, true);
      }
    }
  }
}

// Small enough for compute-sanitizer (long watchdog: memcheck slows the spin waits down).
TEST(MegakernelStop, Small) {
  const ModelConfig c = test::tiny_config(Family::Llama, 4, 2, 64, 128, 200, 2, 1000);
  Model m = make_random_model(c, DType::BF16, 5);
  for (int flags : {1, 0}) {
    auto b = make_mk(m, 32, MegakernelOptions{.watchdog_s = 60.0, .flag_publish = flags});
    ASSERT_TRUE(b);
    for (float temp : {0.f, 1.5f}) {
      SCOPED_TRACE(cat("flags ", flags, temp > 0.f ? ", sampled" : ", greedy"));
      check_stops(*b, c.n_vocab, SampleParams{temp, 0.f, 3, 1}, {K, 1}, false);
    }
  }
}

// The engine's entry points: decode_greedy_until / decode_sample_until (one launch), max_stop_ids, too many ids.
TEST(MegakernelStop, BackendInterface) {
  const ModelConfig c = test::tiny_config(Family::Qwen2, 6, 2, 64, 96, 160, 2, 2000);
  Model m = make_random_model(c, DType::BF16, 8);
  auto b = make_mk(m, 64, {});
  ASSERT_TRUE(b);
  Backend& be = *b;
  EXPECT_EQ(be.max_stop_ids(), MAX_STOP_IDS);
  std::vector<float> logits(size_t(c.n_vocab));
  for (float temp : {0.f, 1.2f}) {
    SCOPED_TRACE(temp > 0.f ? "sampled" : "greedy");
    SamplingParams sp;
    sp.temperature = temp, sp.seed = 4;
    auto decode = [&](int32_t token, int pos, std::span<const int32_t> stops, uint64_t draw, std::span<int32_t> out) {
      return temp > 0.f ? be.decode_sample_until(token, pos, sp, draw, stops, out)
                        : be.decode_greedy_until(token, pos, stops, out);
    };
    be.truncate(0);
    ASSERT_TRUE(be.forward(PROMPT, 0, logits).ok());
    std::vector<int32_t> ref(20);
    ASSERT_TRUE(decode(5, 5, {}, 1, ref).ok());
    const std::vector<int> js = first_occurrences(ref);
    const int j = js[js.size() / 2];
    be.truncate(5);
    std::vector<int32_t> out(20);
    const std::vector<int32_t> stops = {ref[size_t(j)]};
    auto n = decode(5, 5, stops, 1, out);
    ASSERT_TRUE(n.ok()) << n.message();
    EXPECT_EQ(*n, j + 1);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + j + 1, ref.begin()));
    std::vector<int32_t> rest(size_t(20 - j - 1));
    EXPECT_FALSE(decode(ref[size_t(j)], 5 + j + 2, {}, 0, rest).ok()) << "the cache holds 5 + j + 1 positions";
    auto r = decode(ref[size_t(j)], 5 + j + 1, {}, uint64_t(j + 2), rest);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ref.begin() + j + 1));
    const std::vector<int32_t> many(size_t(MAX_STOP_IDS + 1), 3);
    auto bad = decode(1, 25, many, 0, rest);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("stop ids"), std::string::npos) << bad.message();
  }
}

}  // namespace
}  // namespace mk::megakernel
