// Stop ids in the megakernel simulator (isa.h StopIds, issue 5): a launch of K steps whose step j chooses a stop id
// (the first step that chooses it) runs exactly j + 1 steps -- the tokens are the no-stop launch's first j + 1, the
// epoch (and with it every counter, the step barrier and the claim counter) advances by j + 1, and a following launch
// that feeds the stop token continues exactly as the no-stop launch did (so the K/V cache holds the fed positions and
// nothing of the steps that did not run). Greedy and sampled, both publish protocols, SM counts 1, 2, 7, 66, random
// interleavings; stop at the first token, at the last step, K = 1; no stop ids or ids that never occur: unchanged.
// The Backend interface (decode_*_until) too. Run: build/test_megakernel --gtest_filter='SimStop*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "megakernel/model.h"
#include "megakernel/sim.h"
#include "mk_test_util.h"
#include "runtime/sampler.h"

namespace mk::megakernel {
namespace {

using test::tiny_config;

struct Case {
  const char* name;
  ModelConfig config;
  int chunk_len = 0;
  int lm_unit = 0, lm_static = 0;
  bool fuse_down = false;  // MlpGateUpDown (under flags + mid_resid: the residual accumulated in L2, isa.h resid_acc)
};

const std::vector<int32_t> PROMPT = {3, 14, 15, 29};  // inside every test vocabulary

// A simulator with PROMPT run through it (one greedy launch per token); returns the prompt's greedy next token.
int32_t prefill(Simulator& sim, uint64_t seed) {
  SimResult r;
  for (size_t i = 0; i < PROMPT.size(); ++i) {
    auto ri = sim.launch(PROMPT[i], int(i), 1, seed + i);
    EXPECT_TRUE(ri.ok()) << ri.message();
    if (!ri) return 0;
    r = *ri;
  }
  return r.tokens[0];
}

StopIds stop_ids(std::initializer_list<int32_t> ids) {
  StopIds s;
  for (int32_t id : ids) s.ids[s.n++] = id;
  return s;
}

// The steps j whose token occurs there first (a stop id chosen there stops there).
std::vector<int> first_occurrences(const std::vector<int32_t>& t) {
  std::vector<int> js;
  for (int j = 0; j < int(t.size()); ++j)
    if (std::find(t.begin(), t.begin() + j, t[size_t(j)]) == t.begin() + j) js.push_back(j);
  return js;
}

TEST(SimStop, StopAtStepJRunsJPlusOneStepsAndContinues) {
  const Case cases[] = {
      {"llama gqa4 hd64", tiny_config(Family::Llama, 8, 2, 64, 200, 300, 2, 97)},
      {"qwen2 gqa6 split attention", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90, 2, 61), 4},
      {"qwen3 gqa8 tied dynamic lm head", tiny_config(Family::Qwen3, 8, 1, 128, 120, 100, 2, 83, true), 0, 6, 1},
      {"llama gqa4 fused mlp dynamic lm head", tiny_config(Family::Llama, 8, 2, 64, 200, 300, 2, 89), 0, 4, 1, true},
  };
  const int K = 9, max_ctx = 24, P = int(PROMPT.size());
  uint64_t seed = 11;
  for (const Case& k : cases) {
    Model m = make_random_model(k.config, DType::BF16, seed);
    for (int n_sm : {1, 2, 7, 66, -7, -2}) {  // negative: the flag protocol + mid_resid
      for (float temp : {0.f, 1.5f}) {
        SCOPED_TRACE(cat(k.name, ", n_sm ", n_sm, temp > 0.f ? ", sampled" : ", greedy"));
        auto make = [&] {
          auto s = build_schedule(k.config, {.n_sm = std::abs(n_sm), .max_context = max_ctx, .attn_chunk_len = k.chunk_len,
                                             .fuse_down = k.fuse_down, .mid_resid = n_sm < 0, .lm_unit_rows = k.lm_unit,
                                             .lm_static_units = k.lm_static});
          EXPECT_TRUE(s.ok()) << s.message();
          return std::make_unique<Simulator>(m.config, m.weights, std::move(*s),
                                             n_sm < 0 ? Protocol::Flags : Protocol::Counters);
        };
        const SampleParams sp{temp, 0.f, seed * 31, 1};
        // The reference: K steps, no stop ids; and with ids that never occur (out of the vocabulary, negative).
        auto ref_sim = make();
        const int32_t t0 = prefill(*ref_sim, seed);
        auto ref = ref_sim->launch(t0, P, K, seed * 7, false, sp, stop_ids({k.config.n_vocab + 3, -1}));
        ASSERT_TRUE(ref.ok()) << ref.message();
        ASSERT_EQ(ref->tokens.size(), size_t(K));
        auto plain = make();
        prefill(*plain, seed);
        auto pr = plain->launch(t0, P, K, seed * 7 + 1, false, sp);
        ASSERT_TRUE(pr.ok()) << pr.message();
        ASSERT_EQ(pr->tokens, ref->tokens);
        const std::vector<int> js = first_occurrences(ref->tokens);
        std::vector<int> test_js = {js.front(), js[js.size() / 2], js.back()};  // js.front() = 0: the first token
        test_js.erase(std::unique(test_js.begin(), test_js.end()), test_js.end());
        if (temp > 0.f) {
          EXPECT_GE(js.size(), 4u) << "the draws must spread";
        }
        for (int j : test_js) {
          SCOPED_TRACE(cat("stop at step ", j));
          auto sim = make();
          prefill(*sim, seed);
          const uint32_t e0 = sim->epoch();
          const int32_t stop = ref->tokens[size_t(j)];
          auto r = sim->launch(t0, P, K, seed * 13 + uint64_t(j), false, sp, stop_ids({k.config.n_vocab + 1, stop}));
          ASSERT_TRUE(r.ok()) << r.message();
          EXPECT_EQ(r->tokens, std::vector<int32_t>(ref->tokens.begin(), ref->tokens.begin() + j + 1));
          EXPECT_EQ(sim->epoch(), e0 + uint32_t(j + 1));
          if (j + 1 == K) continue;
          // Continue: feed the stop token at the next position, draws on from j + 1.
          SampleParams next = sp;
          next.first_draw += uint64_t(j + 1);
          auto c = sim->launch(stop, P + j + 1, K - j - 1, seed * 17 + uint64_t(j), false, next);
          ASSERT_TRUE(c.ok()) << c.message();
          EXPECT_EQ(c->tokens, std::vector<int32_t>(ref->tokens.begin() + j + 1, ref->tokens.end()));
          EXPECT_EQ(c->logits, ref->logits);
        }
        // K = 1 with its own token as a stop id: one step (nothing after it to skip).
        auto one = make();
        prefill(*one, seed);
        auto r1 = one->launch(t0, P, 1, 5, false, sp, stop_ids({ref->tokens[0]}));
        ASSERT_TRUE(r1.ok()) << r1.message();
        EXPECT_EQ(r1->tokens, std::vector<int32_t>{ref->tokens[0]});
      }
    }
    ++seed;
  }
}

TEST(SimStop, RefusesTooManyStopIds) {
  const ModelConfig c = tiny_config(Family::Llama, 4, 2, 64, 64, 96, 1, 50);
  Model m = make_random_model(c, DType::BF16, 3);
  auto s = build_schedule(c, {.n_sm = 3, .max_context = 8});
  ASSERT_TRUE(s.ok());
  Simulator sim(m.config, m.weights, std::move(*s));
  StopIds many;
  many.n = MAX_STOP_IDS + 1;
  auto r = sim.launch(1, 0, 2, 1, false, {}, many);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("stop ids"), std::string::npos) << r.message();
}

// The engine's entry: decode_greedy_until / decode_sample_until report the tokens produced and cache exactly the fed
// positions; the next call continues; no stop ids or a backend call without them: all tokens.
TEST(SimStop, BackendDecodeUntil) {
  const ModelConfig c = tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 40, true);
  Model m = make_random_model(c, DType::BF16, 23);
  for (float temp : {0.f, 0.9f}) {
    SCOPED_TRACE(temp > 0.f ? "sampled" : "greedy");
    SamplingParams p;
    p.temperature = temp, p.seed = 77;
    auto decode = [&](Backend& b, int32_t token, int pos, std::span<const int32_t> stops, uint64_t draw,
                      std::span<int32_t> out) {
      return temp > 0.f ? b.decode_sample_until(token, pos, p, draw, stops, out) : b.decode_greedy_until(token, pos, stops, out);
    };
    auto ref_b = make_sim_backend(m, 5, 40, 1);
    ASSERT_TRUE(ref_b.ok()) << ref_b.message();
    ASSERT_EQ((*ref_b)->max_stop_ids(), MAX_STOP_IDS);
    std::vector<float> logits(size_t(c.n_vocab));
    ASSERT_TRUE((*ref_b)->forward(PROMPT, 0, logits).ok());
    const int32_t t0 = 7, P = int(PROMPT.size());
    std::vector<int32_t> ref(12);
    auto n_ref = decode(**ref_b, t0, P, {}, 1, ref);
    ASSERT_TRUE(n_ref.ok()) << n_ref.message();
    ASSERT_EQ(*n_ref, 12);
    const std::vector<int> js = first_occurrences(ref);
    const int j = js[js.size() / 2];
    auto b = make_sim_backend(m, 3, 40, 2);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->forward(PROMPT, 0, logits).ok());
    std::vector<int32_t> out(12, -5);
    const std::vector<int32_t> stops = {ref[size_t(j)], 1000};
    auto n = decode(**b, t0, P, stops, 1, out);
    ASSERT_TRUE(n.ok()) << n.message();
    ASSERT_EQ(*n, j + 1);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + j + 1, ref.begin()));
    // The cache holds P + j + 1 positions: a decode at any other position is refused, at that one continues.
    std::vector<int32_t> rest(size_t(12 - j - 1));
    EXPECT_FALSE(decode(**b, ref[size_t(j)], P + j + 2, {}, uint64_t(j + 2), rest).ok());
    auto n2 = decode(**b, ref[size_t(j)], P + j + 1, {}, uint64_t(j + 2), rest);
    ASSERT_TRUE(n2.ok()) << n2.message();
    EXPECT_EQ(*n2, int(rest.size()));
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ref.begin() + j + 1));
    std::vector<int32_t> too_many(size_t(MAX_STOP_IDS + 1), 1);
    EXPECT_FALSE(decode(**b, 1, P + 12, too_many, 0, rest).ok());
  }
}

}  // namespace
}  // namespace mk::megakernel
