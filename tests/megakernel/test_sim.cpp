// Tests of the megakernel protocol on the simulator (src/megakernel/sim.cpp): the simulated step
// equals the CPU reference forward pass, for every family and awkward shapes, on SM counts 1, 2, 7,
// 66 and 132 with random interleavings, over many steps (epoch counters never reset), one or K tokens
// per launch; the L2 accumulators of the flag protocol; and the checker does catch a missing wait or poll and a
// deadlock.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpu/cpu_backend.h"
#include "megakernel/model.h"
#include "megakernel/sim.h"
#include "mk_test_util.h"

namespace mk::megakernel {
namespace {

using test::tiny_config;

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / den);
}

struct Case {
  const char* name;
  ModelConfig config;
  int chunk_len;  // 0: inline attention
  bool fuse_down = false;
  bool dynamic = false;  // chunk ranges follow the step's position (isa.h attn_chunk_range)
  int lm_unit = 0;       // > 0: the dynamic LM head in units of this many rows (isa.h Layout::lm_unit_rows)
  int lm_static = 0;     // its static units per slice
};

std::vector<Case> cases() {
  return {
      {"llama gqa4 hd64 hidden200", tiny_config(Family::Llama, 8, 2, 64, 200, 300), 0},
      {"llama gqa1 hd64 split", tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 301, true), 3},
      {"qwen2 gqa6 hd64 bias", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90), 4},
      {"qwen3 gqa8 hd128 qknorm tied", tiny_config(Family::Qwen3, 8, 1, 128, 120, 100, 2, 257, true), 0},
      {"qwen3 gqa4 hd128 split", tiny_config(Family::Qwen3, 8, 2, 128, 136, 96, 3), 5},
      {"llama gqa4 fused mlp", tiny_config(Family::Llama, 8, 2, 64, 200, 300), 0, true},
      {"qwen2 gqa6 split fused mlp", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90), 4, true},
      {"llama gqa1 hd64 split dynamic", tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 301, true), 3, false, true},
      {"qwen3 gqa4 hd128 split dynamic", tiny_config(Family::Qwen3, 8, 2, 128, 136, 96, 3), 5, false, true},
      {"qwen2 gqa6 split fused mlp dynamic", tiny_config(Family::Qwen2, 6, 1, 64, 72, 90), 2, true, true},
      {"llama gqa4 dynamic lm head", tiny_config(Family::Llama, 8, 2, 64, 200, 300), 0, false, false, 8, 1},
      {"qwen3 gqa8 tied dynamic lm head no static", tiny_config(Family::Qwen3, 8, 1, 128, 120, 100, 2, 257, true), 0, false, false, 6, 0},
      {"llama gqa1 split dynamic lm head", tiny_config(Family::Llama, 4, 4, 64, 96, 130, 2, 301, true), 3, false, true, 5, 2},
      {"qwen3 gqa8 tied fused mlp dynamic lm head", tiny_config(Family::Qwen3, 8, 1, 128, 120, 100, 2, 257, true), 0, true, false, 6, 1},
  };
}

// The fused MLP: cases()' and more odd shapes -- three layers, GQA 1, head_dim 128 split, and a hidden size smaller
// than the QkvProj and LmHead instruction counts on many SMs (instructions with no slice to publish).
std::vector<Case> fused_cases() {
  std::vector<Case> cs;
  for (const Case& k : cases())
    if (k.fuse_down) cs.push_back(k);
  cs.push_back({"llama gqa1 hd64 split fused mlp 3 layers", tiny_config(Family::Llama, 4, 4, 64, 96, 130, 3, 301, true), 3, true});
  cs.push_back({"qwen3 gqa4 hd128 split fused mlp", tiny_config(Family::Qwen3, 8, 2, 128, 136, 96, 3), 5, true});
  cs.push_back({"qwen2 gqa6 hidden40 vocab2000 fused mlp dynamic lm head", tiny_config(Family::Qwen2, 6, 1, 64, 40, 90, 2, 2000),
                0, true, false, 16, 1});
  return cs;
}

// Runs n_steps tokens through the CPU reference and the simulator (one launch per token) and compares
// every step's logits. `flags`: the flag-in-data protocol; `mid`: residual readers use resid_mid. `logits`: each
// step's simulated logits.
void expect_matches_cpu(const Case& k, int n_sm, uint64_t seed, int n_steps, bool flags = false, bool mid = false,
                        std::vector<std::vector<float>>* logits = nullptr) {
  SCOPED_TRACE(cat(k.name, ", n_sm ", n_sm, ", seed ", seed, ", flags ", flags, ", mid_resid ", mid));
  const int max_ctx = 16;
  Model m = make_random_model(k.config, DType::BF16, seed);
  auto cpu = make_cpu_backend(m, max_ctx);
  auto s = build_schedule(k.config, {.n_sm = n_sm, .max_context = max_ctx, .attn_chunk_len = k.chunk_len, .attn_chunks_dynamic = k.dynamic, .fuse_down = k.fuse_down, .mid_resid = mid, .lm_unit_rows = k.lm_unit, .lm_static_units = k.lm_static});
  ASSERT_TRUE(s.ok()) << s.message();
  Simulator sim(m.config, m.weights, std::move(*s), flags ? Protocol::Flags : Protocol::Counters);
  std::vector<float> ref(size_t(k.config.n_vocab));
  int32_t token = int32_t(seed % uint64_t(k.config.n_vocab));
  for (int pos = 0; pos < n_steps; ++pos) {
    ASSERT_TRUE(cpu->forward(std::span(&token, 1), pos, ref).ok());
    auto r = sim.launch(token, pos, 1, seed * 1000 + uint64_t(pos));
    ASSERT_TRUE(r.ok()) << r.message();
    if (logits) logits->push_back(r->logits);
    EXPECT_LT(rel_err(r->logits, ref), 1e-5) << "pos " << pos;
    int32_t greedy = int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin());
    EXPECT_EQ(r->tokens[0], greedy) << "pos " << pos;
    token = (token * 31 + 7) % k.config.n_vocab;  // a teacher-forced sequence, not the greedy one
  }
  EXPECT_EQ(sim.epoch(), uint32_t(n_steps));
}

TEST(Sim, MatchesCpuForwardOnEverySmCount) {
  auto cs = cases();
  uint64_t seed = 1;
  for (int n_sm : {1, 2, 7, 66, 132})
    for (const Case& k : cs) expect_matches_cpu(k, n_sm, seed++, n_sm >= 66 ? 4 : 6);
}

// The flag-in-data protocol (every read polls its pairs, a step barrier orders the K/V cache) and the
// materialised mid-layer residual, alone and together, on every SM count.
TEST(Sim, FlagProtocolAndMidResidualMatchCpuOnEverySmCount) {
  auto cs = cases();
  uint64_t seed = 500;
  for (int n_sm : {1, 2, 7, 66, 132})
    for (size_t i = 0; i < cs.size(); ++i) {
      const int v = int((i + size_t(n_sm)) % 3);  // 0: flags, 1: mid_resid, 2: both
      expect_matches_cpu(cs[i], n_sm, seed++, n_sm >= 66 ? 3 : 5, v != 1, v != 0);
    }
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

// The fused MLP under flags + mid_resid: resid_in(l + 1) is accumulated in L2 from each MlpGateUpDown's resid_mid
// slice and down partial (isa.h resid_acc), polled by QkvProj (layer >= 1) and LmHead. The logits equal the CPU
// forward pass; the counter protocol's float sums (resid_mid + down[0] + ... + down[P-1]) of the same schedule give
// the same bits with and without mid_resid, and the accumulator's fixed-point sums differ from them (the runs are
// not the same code path by accident).
TEST(Sim, FusedMlpAccumulatedResidualMatchesCpu) {
  uint64_t seed = 900;
  for (int n_sm : {1, 2, 7, 66, 132})
    for (const Case& k : fused_cases()) {
      auto s = build_schedule(k.config, {.n_sm = n_sm, .max_context = 16, .fuse_down = true, .mid_resid = true});
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(resid_acc(s->layout)) << k.name;
      const int n_steps = n_sm >= 66 ? 3 : 4;
      std::vector<std::vector<float>> acc, one_mid, one;
      expect_matches_cpu(k, n_sm, seed, n_steps, /*flags=*/true, /*mid=*/true, &acc);
      expect_matches_cpu(k, n_sm, seed, n_steps, false, true, &one_mid);
      expect_matches_cpu(k, n_sm, seed, n_steps, false, false, &one);
      EXPECT_TRUE(same_bits(one_mid, one)) << k.name << ", n_sm " << n_sm;
      EXPECT_FALSE(same_bits(acc, one)) << k.name << ", n_sm " << n_sm;
      ++seed;
    }
}

TEST(Sim, ManyInterleavingsOfOneConfig) {
  auto cs = cases();
  for (uint64_t seed = 100; seed < 112; ++seed) expect_matches_cpu(cs[seed % cs.size()], 3 + int(seed % 5), seed, 5);
}

// K tokens per launch, greedy on the device: the same tokens as the CPU greedy loop and as K
// one-token launches.
TEST(Sim, KTokensPerLaunchEqualGreedyCpu) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const int max_ctx = 24, n_new = 9;
    Model m = make_random_model(k.config, DType::BF16, 77);
    auto cpu = make_cpu_backend(m, max_ctx);
    std::vector<float> logits(size_t(k.config.n_vocab));
    std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
    ASSERT_TRUE(cpu->forward(prompt, 0, logits).ok());
    std::vector<int32_t> want;
    int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int i = 0; i < n_new; ++i) {
      want.push_back(t);
      ASSERT_TRUE(cpu->forward(std::span(&t, 1), int(prompt.size()) + i, logits).ok());
      t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    for (int n_sm : {2, 7, 66, -7}) {  // -7: 7 SMs, flag protocol + mid_resid
      auto s = build_schedule(k.config, {.n_sm = std::abs(n_sm), .max_context = max_ctx, .attn_chunk_len = k.chunk_len, .attn_chunks_dynamic = k.dynamic, .fuse_down = k.fuse_down, .mid_resid = n_sm < 0, .lm_unit_rows = k.lm_unit, .lm_static_units = k.lm_static});
      ASSERT_TRUE(s.ok()) << s.message();
      Simulator sim(m.config, m.weights, std::move(*s), n_sm < 0 ? Protocol::Flags : Protocol::Counters);
      // Prompt one token per launch (prefill), then launches of 4, 4 and 1 steps.
      SimResult r;
      for (size_t i = 0; i < prompt.size(); ++i) {
        auto ri = sim.launch(prompt[i], int(i), 1, 5 + i);
        ASSERT_TRUE(ri.ok()) << ri.message();
        r = *ri;
      }
      std::vector<int32_t> got = {r.tokens.back()};
      int pos = int(prompt.size());
      for (int k_steps : {4, 4}) {
        auto rk = sim.launch(got.back(), pos, k_steps, 1000 + uint64_t(pos) * n_sm);
        ASSERT_TRUE(rk.ok()) << rk.message();
        got.insert(got.end(), rk->tokens.begin(), rk->tokens.end());
        pos += k_steps;
      }
      got.resize(size_t(n_new));
      EXPECT_EQ(got, want) << "n_sm " << n_sm;
    }
  }
}

TEST(Sim, RoundRobinOrderAlsoWorks) {
  const Case k = cases()[2];
  Model m = make_random_model(k.config, DType::F32, 5);
  auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8, .attn_chunk_len = 2});
  ASSERT_TRUE(s.ok());
  Simulator sim(m.config, m.weights, std::move(*s));
  auto r = sim.launch(11, 0, 8, 0, /*round_robin=*/true);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->tokens.size(), 8u);
}

// The checker must fire: without the MLP down projection's wait, its read of act races with the
// gate/up instructions that produce it (whatever order the interleaving happened to run them in).
TEST(Sim, MissingWaitIsCaughtAsARace) {
  const Case k = cases()[0];
  Model m = make_random_model(k.config, DType::BF16, 9);
  for (uint64_t seed : {1, 2, 3}) {
    auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8});
    ASSERT_TRUE(s.ok());
    Simulator sim(m.config, m.weights, std::move(*s));
    sim.drop_wait_for_test(Op::MlpDown, 0);
    auto r = sim.launch(1, 0, 1, seed);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("MlpDown"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("act"), std::string::npos) << r.message();
  }
  // A dropped wait in the next step's first instruction: it would overwrite qkv while the previous step
  // may still read it (K steps per launch), or read a token nothing has written yet.
  auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8});
  ASSERT_TRUE(s.ok());
  Simulator sim(m.config, m.weights, std::move(*s));
  sim.drop_wait_for_test(Op::QkvProj, 0);
  auto r = sim.launch(1, 0, 3, 4);
  ASSERT_FALSE(r.ok());
}

// The device loads cached K/V (positions < pos) before an attention instruction's wait; the simulator
// checks each such load against happens-before in every test above. Here the check must fire: a
// preload that also took position pos (appended by this very step) reads before its writer.
TEST(Sim, PreloadOfThisStepsKvIsCaughtAsARace) {
  const Case k = cases()[0];
  Model m = make_random_model(k.config, DType::BF16, 9);
  for (int chunk : {0, 3, -3}) {  // -3: chunks of 3 with dynamic ranges
    auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8, .attn_chunk_len = std::abs(chunk), .attn_chunks_dynamic = chunk < 0});
    ASSERT_TRUE(s.ok()) << s.message();
    Simulator sim(m.config, m.weights, std::move(*s));
    auto ok = sim.launch(1, 0, 2, 5);  // the real check passes
    ASSERT_TRUE(ok.ok()) << ok.message();
    sim.preload_current_pos_for_test();
    auto r = sim.launch(1, 2, 2, 6);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("before its dependency wait"), std::string::npos) << r.message();
  }
}

// Runs 8 random interleavings of 2 flag-protocol steps with op's polls skipped and counts the failures, each of which
// must be a stale read (a pair or accumulator word of the previous step, or at the first step one that nothing wrote
// yet) that names the op. A stale read shows only when the interleaving runs the reader before a producer (unlike a
// missing counter wait, which the vector clocks catch in any order): most must fail.
void expect_skipped_polls_caught(const Model& m, const ScheduleOptions& o, Op op, const std::string& what) {
  int failed = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto s = build_schedule(m.config, o);
    ASSERT_TRUE(s.ok());
    Simulator sim(m.config, m.weights, std::move(*s), Protocol::Flags);
    sim.skip_flag_polls_for_test(op);
    auto r = sim.launch(1, 0, 2, seed);
    if (r.ok()) continue;
    ++failed;
    EXPECT_TRUE(r.message().find("not this step's") != std::string::npos ||
                r.message().find("which nothing wrote") != std::string::npos)
        << r.message();
    EXPECT_NE(r.message().find(cat(op_name(op), "(")), std::string::npos) << r.message();
  }
  EXPECT_GE(failed, 4) << op_name(op) << ", " << what;
}

// The flag protocol's checks must fire: an op that does not poll its inputs reads a stale pair (whatever the
// interleaving); without the step barrier, K steps per launch read the K/V cache (and overwrite the
// previous step's activations) without happens-before.
TEST(Sim, FlagProtocolMissingPollOrStepBarrierIsCaught) {
  const Case k = cases()[0];
  Model m = make_random_model(k.config, DType::BF16, 9);
  for (bool mid : {false, true})
    for (Op op : {Op::MlpDown, Op::QkvProj, Op::MlpGateUp})  // MlpGateUp with mid_resid: the accumulator's words
      expect_skipped_polls_caught(m, {.n_sm = 7, .max_context = 8, .mid_resid = mid}, op, cat("mid_resid ", mid));
  // The fused MLP under flags + mid_resid (isa.h resid_acc): its readers poll the accumulators' words.
  const Case f = fused_cases()[0];
  Model mf = make_random_model(f.config, DType::BF16, 9);
  const ScheduleOptions fo{.n_sm = 7, .max_context = 8, .attn_chunk_len = f.chunk_len, .fuse_down = true, .mid_resid = true};
  for (Op op : {Op::QkvProj, Op::LmHead, Op::MlpGateUpDown}) expect_skipped_polls_caught(mf, fo, op, "fused MLP");
  for (int chunk : {0, 3}) {
    auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8, .attn_chunk_len = chunk});
    ASSERT_TRUE(s.ok());
    Simulator sim(m.config, m.weights, std::move(*s), Protocol::Flags);
    ASSERT_TRUE(sim.launch(1, 0, 3, 4).ok());  // with the barrier
    sim.drop_step_barrier_for_test();
    auto r = sim.launch(1, 3, 3, 4);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("SM"), std::string::npos) << r.message();
  }
}

// The mid-layer residual accumulator (flags + mid_resid, isa.h mid_acc_word) alternates two sets of words by the step's
// parity, each cleared by the step before it: K steps per launch and launch after launch give the CPU's logits on 1, 2,
// 7 and 66 SMs (expect_matches_cpu above runs the same), and without MlpGateUp's clearing the step after next adds
// to a stale sum -- caught, whatever the interleaving.
TEST(Sim, MidAccumulatorUnclearedWordIsCaught) {
  const Case k = cases()[0];
  Model m = make_random_model(k.config, DType::BF16, 9);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto s = build_schedule(k.config, {.n_sm = 7, .max_context = 8, .mid_resid = true});
    ASSERT_TRUE(s.ok());
    Simulator sim(m.config, m.weights, std::move(*s), Protocol::Flags);
    ASSERT_TRUE(sim.launch(1, 0, 2, seed).ok());  // two steps: each parity used once, from clean words
    sim.skip_acc_clear_for_test();
    ASSERT_TRUE(sim.launch(3, 2, 1, seed).ok());   // step 2: words step 1 cleared; it leaves step 1's as they are
    auto r = sim.launch(4, 3, 1, seed);            // step 3 finds step 1's sums in its words
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("not cleared"), std::string::npos) << r.message();
  }
  // The fused MLP's resid_in accumulator (isa.h resid_acc): without its readers' clearing (QkvProj, LmHead) alone.
  const Case f = fused_cases()[0];
  Model mf = make_random_model(f.config, DType::BF16, 9);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto s = build_schedule(f.config, {.n_sm = 7, .max_context = 8, .attn_chunk_len = f.chunk_len, .fuse_down = true, .mid_resid = true});
    ASSERT_TRUE(s.ok());
    Simulator sim(mf.config, mf.weights, std::move(*s), Protocol::Flags);
    ASSERT_TRUE(sim.launch(1, 0, 2, seed).ok());
    sim.skip_acc_clear_for_test(/*resid_only=*/true);
    ASSERT_TRUE(sim.launch(3, 2, 1, seed).ok());
    auto r = sim.launch(4, 3, 1, seed);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("not cleared"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("resid_in("), std::string::npos) << r.message();
  }
}

// The dynamic LM head's claim arithmetic (isa.h Layout::lm_unit_rows): one claim too many per instruction is caught.
TEST(Sim, DynamicLmHeadClaimDriftIsCaught) {
  const ModelConfig c = tiny_config(Family::Llama, 8, 2, 64, 200, 300);
  Model m = make_random_model(c, DType::BF16, 3);
  for (bool flags : {false, true}) {
    auto s = build_schedule(c, {.n_sm = 7, .max_context = 8, .lm_unit_rows = 8, .lm_static_units = 1});
    ASSERT_TRUE(s.ok()) << s.message();
    Simulator sim(m.config, m.weights, std::move(*s), flags ? Protocol::Flags : Protocol::Counters);
    ASSERT_TRUE(sim.launch(3, 0, 2, 1).ok());  // the correct count passes
    sim.extra_lm_claim_for_test();
    auto r = sim.launch(4, 2, 1, 2);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("claim"), std::string::npos) << r.message();
  }
}

TEST(Sim, ImpossibleWaitIsReportedAsDeadlock) {
  const Case k = cases()[0];
  Model m = make_random_model(k.config, DType::BF16, 9);
  auto s = build_schedule(k.config, {.n_sm = 5, .max_context = 8});
  ASSERT_TRUE(s.ok());
  for (auto& q : s->queues)
    for (Instr& in : q)
      if (in.op == Op::MlpGateUp) in.waits[0].count += 1;  // one producer more than exist
  Simulator sim(m.config, m.weights, std::move(*s));
  auto r = sim.launch(1, 0, 1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("deadlock"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("MlpGateUp"), std::string::npos) << r.message();
}

TEST(Sim, BackendInterfaceMatchesCpu) {
  const Case k = cases()[1];
  Model m = make_random_model(k.config, DType::BF16, 21);
  auto sim = make_sim_backend(m, 7, 32, 3);
  ASSERT_TRUE(sim.ok()) << sim.message();
  auto cpu = make_cpu_backend(m, 32);
  std::vector<int32_t> prompt = {1, 2, 3, 250, 4};
  std::vector<float> a(size_t(k.config.n_vocab)), b(a.size());
  ASSERT_TRUE((*sim)->forward(prompt, 0, a).ok());
  ASSERT_TRUE(cpu->forward(prompt, 0, b).ok());
  EXPECT_LT(rel_err(a, b), 1e-5);
  EXPECT_FALSE((*sim)->forward(prompt, 3, a).ok());  // wrong position: a clear error, not a crash
}

TEST(Sim, BackendDefaultContextAndRefusals) {
  Model m = make_random_model(cases()[0].config, DType::F32, 2);
  auto b = make_sim_backend(m, 3, 0, 1);  // 0: default context
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ((*b)->max_context(), 1024);
  auto bad = make_sim_backend(m, 0, 16, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("n_sm"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace mk::megakernel
