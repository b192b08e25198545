// The engine's first token of a sampled request drawn on the device (Backend::sample_last) on the fake backend: the
// ids equal the all-host loop's (draw 0 from the prefill's logits, then decode_sample from draw 1) for every length
// and seed, with and without the device's stop check; a greedy request on a backend with device greedy takes its
// first token there too (the argmax), from a prefill whose logits never reach the host; penalised and host-only
// requests never call it; a failure of the draw is reported with its reason and leaves no cached state.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "fake_backend.h"
#include "megakernel/engine.h"

namespace mk {
namespace {

using testing::FakeBackend;
using testing::hash_next;

struct Outcome {
  std::vector<int32_t> ids;
  int n_sample_last = 0, n_decode_sample = 0;
};

// device: the fake draws on the device (sample_last + decode_sample); stop: and checks the EOS ids there.
Outcome run_engine(bool device, bool stop, const SamplingParams& sp, int max_new, const std::vector<int32_t>& prompt,
        const std::vector<int32_t>& eos = {}) {
  const int V = 37;
  FakeBackend be(V, 512, [&](const std::vector<int32_t>& s) { return hash_next(s, V); });
  be.device_sample = device;
  be.device_stop = stop;
  be.config_.eos_token_ids = eos;
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling = sp;
  auto r = eng.generate(prompt, o);
  EXPECT_TRUE(r) << r.message();
  EXPECT_EQ(be.seq, eng.cached_ids());
  return Outcome{r ? r->ids : std::vector<int32_t>{}, be.n_sample_last, be.n_decode_sample};
}

TEST(EngineSampleLast, FirstTokenOnTheDeviceEqualsTheHostLoop) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 12; ++trial) {
    SamplingParams sp;
    sp.temperature = 2.f + float(trial % 4);  // logits 10 / 0 at V = 37: the predicted id has probability 0.1-0.4
    sp.seed = rng();
    const int max_new = std::vector<int>{1, 2, 17, 40}[size_t(trial % 4)];
    std::vector<int32_t> prompt(size_t(1 + trial % 5));
    for (auto& t : prompt) t = int32_t(rng() % 37);
    SCOPED_TRACE(cat("trial ", trial, " max_new ", max_new, " seed ", sp.seed));
    const Outcome host = run_engine(false, false, sp, max_new, prompt);
    ASSERT_EQ(int(host.ids.size()), max_new);
    for (bool stop : {false, true}) {
      const Outcome dev = run_engine(true, stop, sp, max_new, prompt);
      EXPECT_EQ(dev.ids, host.ids) << (stop ? "with device stops" : "host stops");
      EXPECT_EQ(dev.n_sample_last, 1) << "the first token is drawn by Backend::sample_last";
      EXPECT_EQ(dev.n_decode_sample > 0, max_new > 1);
    }
    EXPECT_EQ(host.n_sample_last, 0);
  }
}

// The first draw decides the rest: a request whose first token is an EOS stops there on both paths, and a shifted
// first draw (the engine forgetting Sampler::advance) would not reproduce the host's ids: many seeds differ in the
// first token, so the comparison above can fail.
TEST(EngineSampleLast, FirstTokenEosAndDrawIndicesMatter) {
  SamplingParams sp;
  sp.temperature = 3.f;
  std::set<int32_t> firsts;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    sp.seed = seed;
    const Outcome host = run_engine(false, false, sp, 3, {5, 6});
    firsts.insert(host.ids[0]);
    const Outcome eos_dev = run_engine(true, true, sp, 30, {5, 6}, {host.ids[0]});
    ASSERT_EQ(eos_dev.ids.size(), 1u) << "seed " << seed << ": the first token is the EOS";
    EXPECT_EQ(eos_dev.ids[0], host.ids[0]);
    EXPECT_EQ(eos_dev.n_decode_sample, 0);
  }
  EXPECT_GT(firsts.size(), 4u) << "the first draws should spread over many ids";
}

TEST(EngineSampleLast, OnlyForParametersTheDeviceDraws) {
  const int V = 37;
  for (int c = 0; c < 3; ++c) {
    FakeBackend be(V, 128, [&](const auto& s) { return hash_next(s, V); });
    be.device_sample = c != 2;
    be.device_greedy = true;
    Engine eng(be);
    GenerateOptions o;
    o.max_new_tokens = 5;
    if (c == 0) o.sampling.temperature = 0.f;  // greedy: the host argmax of the prefill's logits, as before
    if (c == 1) o.sampling.temperature = 1.f, o.sampling.repetition_penalty = 1.2f;  // the penalty needs the host
    if (c == 2) o.sampling.temperature = 1.f;  // a backend without device sampling
    auto r = eng.generate(std::vector<int32_t>{1, 2}, o);
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(be.n_sample_last, c == 0 ? 1 : 0) << "case " << c;
    EXPECT_EQ(be.n_forward_on_device, c == 0 ? 1 : 0) << "case " << c << ": the prefill keeps its logits on the device";
  }
}

// Greedy with the first token on the device: the ids equal the all-host loop's for every prompt length and prefix
// reuse (a second request recomputes one token), with and without the device's stop check.
TEST(EngineSampleLast, GreedyFirstTokenOnTheDeviceEqualsTheHostLoop) {
  const int V = 41;
  std::mt19937 rng(77);
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<int32_t> prompt(size_t(1 + trial % 4));
    for (auto& t : prompt) t = int32_t(rng() % V);
    const int max_new = 1 + trial * 3;
    auto run = [&](bool device, bool stop) {
      FakeBackend be(V, 256, [&](const auto& s) { return hash_next(s, V); });
      be.device_greedy = device;
      be.device_stop = stop;
      Engine eng(be);
      GenerateOptions o;
      o.max_new_tokens = max_new;
      auto a = eng.generate(prompt, o);
      auto b = eng.generate(prompt, o);  // the cached prompt: one token recomputed
      EXPECT_TRUE(a && b);
      EXPECT_EQ(be.n_forward_on_device, device ? 2 : 0);
      return a && b ? std::vector<std::vector<int32_t>>{a->ids, b->ids} : std::vector<std::vector<int32_t>>{};
    };
    const auto host = run(false, false);
    ASSERT_EQ(host.size(), 2u);
    EXPECT_EQ(host[0], host[1]);
    EXPECT_EQ(run(true, false), host) << "trial " << trial;
    EXPECT_EQ(run(true, true), host) << "trial " << trial << " with device stops";
  }
}

TEST(EngineSampleLast, FailureIsReportedAndResetsTheCache) {
  const int V = 37;
  FakeBackend be(V, 128, [&](const auto& s) { return hash_next(s, V); });
  be.device_sample = true;
  be.fail_sample_last = true;
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 1.f;
  auto r = eng.generate(std::vector<int32_t>{1, 2, 3}, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("drawing the first token on the device at position 3"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("injected sample_last failure"), std::string::npos) << r.message();
  EXPECT_TRUE(eng.cached_ids().empty());
  EXPECT_TRUE(be.seq.empty()) << "the backend's cache is emptied as after other failures";
  be.fail_sample_last = false;  // the next request runs normally, from a fresh prefill
  auto again = eng.generate(std::vector<int32_t>{1, 2, 3}, o);
  ASSERT_TRUE(again) << again.message();
  EXPECT_EQ(again->ids.size(), 8u);
  // Non-finite logits: the device's "no finite logit" error, named as the first draw's.
  be.nan_logits = true;
  auto nan = eng.generate(std::vector<int32_t>{4}, o);
  ASSERT_FALSE(nan);
  EXPECT_NE(nan.message().find("finite"), std::string::npos) << nan.message();
  EXPECT_TRUE(eng.cached_ids().empty());
}

}  // namespace
}  // namespace mk
