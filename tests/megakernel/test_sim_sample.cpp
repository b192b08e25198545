// Sampled decoding in the megakernel simulator (isa.h SampleParams: the Argmax instruction draws by the host
// Sampler's rule): sample_draw equals mk::Sampler draw for draw on awkward logits; K sampled steps per launch give
// the tokens of the host loop (CPU forward + Sampler, same seed and draw indices) on SM counts 1, 2, 7 and 66, both
// publish protocols; the flag protocol's draw must poll the logits it reads; the Backend interface
// (decode_sample from the Sampler's draw count, advance) equals the host loop too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cpu/cpu_backend.h"
#include "megakernel/engine.h"
#include "megakernel/model.h"
#include "megakernel/sim.h"
#include "mk_test_util.h"
#include "runtime/sampler.h"

namespace mk::megakernel {
namespace {

using test::tiny_config;

SamplingParams params(float t, float min_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = t, p.min_p = min_p, p.seed = seed;
  return p;
}

TEST(SimSample, DrawEqualsHostSampler) {
  std::mt19937 rng(7);
  for (int n : {1, 2, 33, 301, 4099}) {
    std::normal_distribution<float> nd(0.f, 3.f);
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& x : logits) x = nd(rng);
    if (n > 30) logits[3] = -INFINITY, logits[5] = NAN, logits[7] = INFINITY, logits[11] = logits[12];
    for (float t : {0.05f, 0.7f, 1.f, 3.f})
      for (float min_p : {0.f, 0.02f, 0.3f, 1.f}) {
        Sampler host(params(t, min_p, 99 + uint64_t(n)));
        std::set<int32_t> seen;
        for (uint64_t d = 0; d < 60; ++d) {
          std::vector<float> l = logits;  // the Sampler modifies its input
          const int32_t want = host.sample(l, {});
          const int32_t got = sample_draw(logits.data(), n, SampleParams{t, min_p, 99 + uint64_t(n), 0}, d);
          ASSERT_EQ(got, want) << "n " << n << " T " << t << " min_p " << min_p << " draw " << d;
          seen.insert(got);
        }
        if (n == 4099 && t == 3.f && min_p == 0.f) {
          EXPECT_GT(seen.size(), 30u);  // the draws do spread
        }
      }
  }
  std::vector<float> none = {-INFINITY, NAN, INFINITY};
  EXPECT_EQ(sample_draw(none.data(), 3, SampleParams{1.f, 0.f, 1, 0}, 0), -1);
}

// The megakernel's two-stage draw (sim.h sample_part_sum / sample_pick_part / sample_pick_in_part, the device's
// arithmetic) as SamplePartial and Argmax run it: ranges of 1, 2, 8 and 20 tiles, the max as the LM head's records
// give it (sample_max where the best is not finite). It must pick sample_draw's id on every draw.
int32_t two_stage_draw(const std::vector<float>& logits, int part_tiles, const SampleParams& sp, uint64_t draw) {
  const int n = int(logits.size()), ids = part_tiles * SAMPLE_TILE;
  const float m = sample_max(logits.data(), n);
  std::vector<SamplePart> parts;
  for (int r0 = 0; r0 < n; r0 += ids) parts.push_back(sample_part_sum(logits.data(), n, r0, std::min(n, r0 + ids), m, sp));
  double t = 0;
  const int k = sample_pick_part(parts, sp, draw, &t);
  if (k < 0) {
    int32_t last = -1;
    for (const SamplePart& p : parts) last = std::max(last, p.kept);
    return last;
  }
  return sample_pick_in_part(logits.data(), n, k * ids, std::min(n, (k + 1) * ids), m, sp, t, parts[size_t(k)].kept);
}

TEST(SimSample, TwoStageDrawEqualsOnePass) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int n : {1, 5, 127, 129, 1000, 4099, 40000})
    for (int special = 0; special < 3; ++special) {  // 1: -inf / NaN / +inf entries; 2: spiky
      std::normal_distribution<float> nd(0.f, special == 2 ? 6.f : 2.f);
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& x : logits) x = nd(rng);
      if (special == 1 && n > 8) logits[1] = -INFINITY, logits[n / 2] = NAN, logits[n - 2] = INFINITY;
      for (int part_tiles : {1, 2, 8, 20})
        for (float t : {0.3f, 1.f, 2.5f})
          for (float min_p : {0.f, 0.05f}) {
            const SampleParams sp{t, min_p, uint64_t(n) * 3 + uint64_t(special), 0};
            for (uint64_t d = 0; d < 8; ++d, ++checked)
              ASSERT_EQ(two_stage_draw(logits, part_tiles, sp, d), sample_draw(logits.data(), n, sp, d))
                  << "n " << n << " special " << special << " tiles " << part_tiles << " T " << t << " min_p " << min_p
                  << " draw " << d;
          }
    }
  EXPECT_EQ(checked, 7 * 3 * 4 * 3 * 2 * 8);
  const std::vector<float> none = {-INFINITY, NAN, INFINITY};
  EXPECT_EQ(two_stage_draw(none, 1, SampleParams{1.f, 0.f, 1, 0}, 0), -1);
}

// The host loop: CPU forward + Sampler from the prompt on; out[0] is drawn after the prompt (draw 0).
std::vector<int32_t> host_loop(const Model& m, const std::vector<int32_t>& prompt, int n_new, const SamplingParams& sp) {
  auto cpu = make_cpu_backend(m, int(prompt.size()) + n_new + 1);
  std::vector<float> logits(size_t(m.config.n_vocab));
  EXPECT_TRUE(cpu->forward(prompt, 0, logits).ok());
  Sampler s(sp);
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    out.push_back(s.sample(logits, {}));
    if (i + 1 < n_new) {
      EXPECT_TRUE(cpu->forward(std::span(&out.back(), 1), int(prompt.size()) + i, logits).ok());
    }
  }
  return out;
}

struct Case {
  const char* name;
  ModelConfig config;
  int chunk_len = 0;
  int lm_unit = 0, lm_static = 0;
  bool fuse_down = false;  // MlpGateUpDown (under flags + mid_resid: the residual accumulated in L2, isa.h resid_acc)
};

TEST(SimSample, KSampledStepsPerLaunchEqualHostLoop) {
  const Case cases[] = {
      {"llama gqa4 hd64 vocab 1000", tiny_config(Family::Llama, 8, 2, 64, 200, 300, 2, 1000)},
      {"qwen2 gqa6 split", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90, 2, 517), 4},
      {"qwen3 gqa8 tied dynamic lm head", tiny_config(Family::Qwen3, 8, 1, 128, 120, 100, 2, 611, true), 0, 6, 1},
      {"qwen2 gqa6 split fused mlp dynamic lm head", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90, 2, 517), 4, 8, 1, true},
  };
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  const int n_new = 12, max_ctx = 24;
  uint64_t seed = 40;
  for (const Case& k : cases) {
    Model m = make_random_model(k.config, DType::BF16, seed);
    for (float min_p : {0.f, 0.1f}) {
      const SamplingParams sp = params(1.f, min_p, seed * 17);
      const std::vector<int32_t> want = host_loop(m, prompt, n_new, sp);
      const std::set<int32_t> distinct(want.begin(), want.end());
      if (min_p == 0.f) {
        EXPECT_GT(distinct.size(), 5u) << k.name << ": the draws must spread over the vocabulary";
      }
      for (int n_sm : {1, 2, 7, 66, -7, -2}) {  // negative: the flag protocol + mid_resid
        SCOPED_TRACE(cat(k.name, ", min_p ", min_p, ", n_sm ", n_sm));
        auto s = build_schedule(k.config, {.n_sm = std::abs(n_sm), .max_context = max_ctx, .attn_chunk_len = k.chunk_len,
                                           .fuse_down = k.fuse_down, .mid_resid = n_sm < 0, .lm_unit_rows = k.lm_unit, .lm_static_units = k.lm_static});
        ASSERT_TRUE(s.ok()) << s.message();
        Simulator sim(m.config, m.weights, std::move(*s), n_sm < 0 ? Protocol::Flags : Protocol::Counters);
        SimResult r;
        for (size_t i = 0; i < prompt.size(); ++i) {  // the prompt one greedy launch per token
          auto ri = sim.launch(prompt[i], int(i), 1, seed + i);
          ASSERT_TRUE(ri.ok()) << ri.message();
          r = *ri;
        }
        Sampler host(sp);  // the first token on the host (draw 0), as the engine does
        std::vector<int32_t> got = {host.sample(r.logits, {})};
        int pos = int(prompt.size());
        for (int k_steps : {1, 4, 6}) {  // then draws 1, 2..5, 6..11 on the "device"
          auto rk = sim.launch(got.back(), pos, k_steps, seed * 100 + uint64_t(pos), false,
                               SampleParams{sp.temperature, sp.min_p, sp.seed, host.n_draws()});
          ASSERT_TRUE(rk.ok()) << rk.message();
          host.advance(uint64_t(k_steps));
          got.insert(got.end(), rk->tokens.begin(), rk->tokens.end());
          pos += k_steps;
        }
        EXPECT_EQ(got, want);
        // Greedy launches after sampled ones are unchanged: the next argmax equals the CPU's.
        auto g = sim.launch(got.back(), pos, 1, 3);
        ASSERT_TRUE(g.ok()) << g.message();
        EXPECT_EQ(g->tokens[0], int32_t(std::max_element(g->logits.begin(), g->logits.end()) - g->logits.begin()));
      }
    }
    ++seed;
  }
}

// The flag protocol: a sampled draw that does not poll its inputs reads range sums (Argmax) or logits
// (SamplePartial) their producers have not written yet in most interleavings -- logits are flagged in a sampled
// launch, so the checker sees the stale pairs.
TEST(SimSample, FlagProtocolDrawWithoutPollsIsCaught) {
  const ModelConfig c = tiny_config(Family::Llama, 8, 2, 64, 200, 300, 2, 400);
  Model m = make_random_model(c, DType::BF16, 9);
  for (Op op : {Op::Argmax, Op::SamplePartial}) {
    int failed = 0;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      auto s = build_schedule(c, {.n_sm = 7, .max_context = 8});
      ASSERT_TRUE(s.ok());
      Simulator sim(m.config, m.weights, std::move(*s), Protocol::Flags);
      ASSERT_TRUE(sim.launch(1, 0, 1, seed, false, SampleParams{1.f, 0.f, 5, 0}).ok());  // with its polls
      sim.skip_flag_polls_for_test(op);
      auto r = sim.launch(2, 1, 2, seed, false, SampleParams{1.f, 0.f, 5, 1});
      if (r.ok()) continue;
      ++failed;
      EXPECT_NE(r.message().find(op_name(op)), std::string::npos) << r.message();
      EXPECT_NE(r.message().find("not this step's"), std::string::npos) << r.message();
    }
    EXPECT_GE(failed, 4) << op_name(op);
  }
  // Counters: SamplePartial's wait for the LmHead instructions orders its logits reads, Argmax's for the
  // SamplePartials its reads of their sums.
  for (auto [op, index] : {std::pair(Op::SamplePartial, 0), std::pair(Op::Argmax, 1)}) {
    auto s = build_schedule(c, {.n_sm = 7, .max_context = 8});
    ASSERT_TRUE(s.ok());
    Simulator sim(m.config, m.weights, std::move(*s));
    sim.drop_wait_for_test(op, index);
    auto r = sim.launch(1, 0, 1, 1, false, SampleParams{1.f, 0.f, 5, 0});
    ASSERT_FALSE(r.ok()) << op_name(op);
    EXPECT_NE(r.message().find(op_name(op)), std::string::npos) << r.message();
  }
  // A greedy launch's SamplePartial only signals: Argmax's wait for the LmHeads is the one its records need.
  auto s = build_schedule(c, {.n_sm = 7, .max_context = 8});
  ASSERT_TRUE(s.ok());
  Simulator sim(m.config, m.weights, std::move(*s));
  sim.drop_wait_for_test(Op::Argmax, 0);
  auto r = sim.launch(1, 0, 1, 1, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("Argmax"), std::string::npos) << r.message();
}

// The engine's use of the Backend interface: decode_sample in chunks from the Sampler's draw count, then advance.
TEST(SimSample, BackendDecodeSampleEqualsHostLoop) {
  const ModelConfig c = tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 700, true);
  Model m = make_random_model(c, DType::BF16, 23);
  auto b = make_sim_backend(m, 7, 32, 3);
  ASSERT_TRUE(b.ok()) << b.message();
  Backend& be = **b;
  const SamplingParams sp = params(0.8f, 0.05f, 1234);
  ASSERT_TRUE(be.can_decode_sample(sp));
  SamplingParams topk = sp;
  topk.top_k = 5;
  EXPECT_FALSE(be.can_decode_sample(topk));
  EXPECT_FALSE(be.can_decode_sample(params(0.f, 0.f, 1)));  // greedy: decode_greedy's job
  const std::vector<int32_t> prompt = {5, 6, 7};
  const std::vector<int32_t> want = host_loop(m, prompt, 10, sp);
  std::vector<float> logits(size_t(c.n_vocab));
  ASSERT_TRUE(be.forward(prompt, 0, logits).ok());
  Sampler host(sp);
  std::vector<int32_t> got = {host.sample(logits, {})};
  std::vector<int32_t> chunk;
  for (int n : {4, 5}) {
    chunk.resize(size_t(n));
    ASSERT_TRUE(be.decode_sample(got.back(), int(prompt.size() + got.size()) - 1, sp, host.n_draws(), chunk).ok());
    host.advance(chunk.size());
    got.insert(got.end(), chunk.begin(), chunk.end());
  }
  EXPECT_EQ(got, want);
  EXPECT_FALSE(be.decode_sample(got.back(), 0, sp, 0, chunk).ok());  // wrong position: an error, not a crash
  // Greedy through the same interface: the CPU's argmax loop.
  auto g = make_sim_backend(m, 2, 32, 4);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->forward(prompt, 0, logits).ok());
  std::vector<int32_t> greedy(6);
  ASSERT_TRUE((*g)->decode_greedy(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()), 3, greedy).ok());
  const std::vector<int32_t> ref = host_loop(m, prompt, 7, params(0.f, 0.f, 0));  // ref[0]: the prompt's argmax
  EXPECT_EQ(greedy, std::vector<int32_t>(ref.begin() + 1, ref.end()));
}

// The engine on the simulator (`--backend megakernel-sim`): the first token chosen from the prefill's logits by
// sample_last (greedy: the argmax; sampled: draw 0), the rest on the simulated device; the ids equal the CPU
// reference's host loop for greedy and sampled requests (a sampled one needs sample_last to exist at all).
TEST(SimSample, EngineFirstTokenOnTheSimulatorEqualsHostLoop) {
  const ModelConfig c = tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 700, true);
  Model m = make_random_model(c, DType::BF16, 29);
  const std::vector<int32_t> prompt = {9, 8, 7, 6};
  for (const SamplingParams& sp : {params(0.f, 0.f, 0), params(0.9f, 0.02f, 4321)}) {
    auto b = make_sim_backend(m, 5, 32, 6);
    ASSERT_TRUE(b.ok()) << b.message();
    Engine eng(**b);
    GenerateOptions o;
    o.max_new_tokens = 9;
    o.ignore_eos = true;
    o.sampling = sp;
    auto r = eng.generate(prompt, o);
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(r->ids, host_loop(m, prompt, 9, sp)) << "temperature " << sp.temperature;
  }
}

}  // namespace
}  // namespace mk::megakernel
