// Engine tests on a fake deterministic backend: stop conditions (max tokens, EOS, stop strings spanning
// tokens, callback), the max-context error, streaming that never splits UTF-8, KV prefix reuse, seeded
// sampling, and error propagation.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "fake_backend.h"
#include "megakernel/engine.h"

namespace mk {
namespace {

using testing::FakeBackend;
using testing::hash_next;
using testing::MapTextStream;


std::vector<int32_t> reference_greedy(std::vector<int32_t> seq, int n_new, int n_vocab) {
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    out.push_back(hash_next(seq, n_vocab));
    seq.push_back(out.back());
  }
  return out;
}

bool valid_complete_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(Engine, GreedyRunsToMaxTokensWithOneForwardPerToken) {
  const int V = 101;
  FakeBackend be(V, 64, [&](const auto& s) { return hash_next(s, V); });
  Engine eng(be);
  const std::vector<int32_t> prompt{5, 17, 3};
  GenerateOptions o;
  o.max_new_tokens = 9;
  auto r = eng.generate(prompt, o);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->ids, reference_greedy(prompt, 9, V));
  EXPECT_EQ(r->stop, StopReason::MaxTokens);
  EXPECT_EQ(be.n_forward, 9);  // prefill + 8 decode steps; the last token is never fed
  EXPECT_EQ(be.forward_sizes.front(), 3);
  EXPECT_EQ(be.forward_positions.back(), 3 + 7);
  EXPECT_EQ(r->stats.n_generated, 9);
  EXPECT_EQ(r->stats.n_decode_steps(), 8);
  EXPECT_GE(r->stats.prefill_ms, 0.0);
}

TEST(Engine, StopsAtEosAndKeepsItInIds) {
  FakeBackend be(50, 64, [](const auto& s) { return s.size() >= 6 ? 2 : int32_t(10 + s.size()); });
  be.config_.eos_token_ids = {2, 3};
  Engine eng(be);
  MapTextStream text({{10 + 3, "a"}, {10 + 4, "b"}, {10 + 5, "c"}, {2, "<eos>"}});
  GenerateOptions o;
  o.max_new_tokens = 20;
  std::vector<int32_t> streamed;
  auto r = eng.generate(std::vector<int32_t>{1, 1, 1}, o, &text, [&](std::string_view, std::span<const int32_t> ids) {
    streamed.insert(streamed.end(), ids.begin(), ids.end());
    return true;
  });
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->ids, (std::vector<int32_t>{13, 14, 15, 2}));
  EXPECT_EQ(streamed, r->ids);
  EXPECT_EQ(r->text, "abc");  // EOS text is not emitted
  EXPECT_EQ(r->stop, StopReason::Eos);

  o.ignore_eos = true;
  o.max_new_tokens = 6;
  eng.reset();
  auto r2 = eng.generate(std::vector<int32_t>{1, 1, 1}, o);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->ids.size(), 6u);
  EXPECT_EQ(r2->stop, StopReason::MaxTokens);

  o.ignore_eos = false;
  o.extra_eos_ids = {14};
  auto r3 = eng.generate(std::vector<int32_t>{1, 1, 1}, o);
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->ids, (std::vector<int32_t>{13, 14}));
}

TEST(Engine, PromptPlusNBeyondMaxContextIsAnErrorBeforeAnyWork) {
  FakeBackend be(10, 8, [](const auto&) { return 1; });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 4;
  auto r = eng.generate(std::vector<int32_t>{1, 2, 3, 4, 5}, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("exceeds the max context of 8"), std::string::npos) << r.message();
  EXPECT_EQ(be.n_forward, 0);
  o.max_new_tokens = 3;  // exactly fits
  EXPECT_TRUE(eng.generate(std::vector<int32_t>{1, 2, 3, 4, 5}, o));
}

TEST(Engine, BadRequestsAreClearErrors) {
  FakeBackend be(10, 64, [](const auto&) { return 1; });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 4;
  auto r = eng.generate(std::vector<int32_t>{}, o);
  EXPECT_NE(r.message().find("empty"), std::string::npos);
  r = eng.generate(std::vector<int32_t>{1, 10}, o);
  EXPECT_NE(r.message().find("prompt token 1 is 10"), std::string::npos) << r.message();
  r = eng.generate(std::vector<int32_t>{-1}, o);
  EXPECT_FALSE(r);
  o.stop_strings = {"x"};
  r = eng.generate(std::vector<int32_t>{1}, o);  // no TextStream
  EXPECT_NE(r.message().find("stop strings need a tokenizer"), std::string::npos);
  o.stop_strings = {};
  o.sampling.top_p = 2.f;
  r = eng.generate(std::vector<int32_t>{1}, o);
  EXPECT_NE(r.message().find("top_p"), std::string::npos);
  EXPECT_EQ(be.n_forward, 0);
}

TEST(Engine, StopStringSpanningTokensIsCutAndNotEmitted) {
  // tokens 1..6 spell "He" "llo" " wo" "rld" "!" "?"; stop "lo wor" spans three tokens.
  FakeBackend be(10, 64, [](const auto& s) { return int32_t((s.size() - 1) % 6 + 1); });
  Engine eng(be);
  MapTextStream text({{1, "He"}, {2, "llo"}, {3, " wo"}, {4, "rld"}, {5, "!"}, {6, "?"}});
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.stop_strings = {"zzz", "lo wor"};
  std::string streamed;
  auto r = eng.generate(std::vector<int32_t>{0}, o, &text, [&](std::string_view t, auto) {
    streamed += t;
    return true;
  });
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->text, "Hel");
  EXPECT_EQ(streamed, "Hel");
  EXPECT_EQ(r->ids, (std::vector<int32_t>{1, 2, 3, 4}));  // the token completing the stop string is generated
  EXPECT_EQ(r->stop, StopReason::StopString);
}

TEST(Engine, StreamingNeverSplitsUtf8) {
  // Byte-level tokens: each id is ONE byte of a UTF-8 text, so characters span tokens.
  const std::string s = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87!";
  std::map<int32_t, std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, char(b));
  FakeBackend be(256, 128, [&](const auto& seq) { return int32_t(static_cast<unsigned char>(s[(seq.size() - 1) % s.size()])); });
  Engine eng(be);
  MapTextStream text(bytes);
  GenerateOptions o;
  o.max_new_tokens = int(s.size());
  std::string streamed;
  int n_calls = 0;
  auto r = eng.generate(std::vector<int32_t>{'x'}, o, &text, [&](std::string_view t, auto) {
    EXPECT_TRUE(valid_complete_utf8(std::string(t))) << "chunk " << n_calls;
    streamed += t;
    ++n_calls;
    return true;
  });
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(streamed, s);
  EXPECT_EQ(r->text, s);
}

TEST(Engine, CallbackCanStop) {
  FakeBackend be(10, 64, [](const auto&) { return 4; });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 10;
  int calls = 0;
  auto r = eng.generate(std::vector<int32_t>{1}, o, nullptr, [&](auto, auto) { return ++calls < 3; });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ids.size(), 3u);
  EXPECT_EQ(r->stop, StopReason::Callback);
}

TEST(Engine, ReusesTheCachedPrefixAndMatchesAFreshRun) {
  const int V = 97;
  FakeBackend be(V, 256, [&](const auto& s) { return hash_next(s, V); });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 5;
  std::vector<int32_t> prompt{3, 1, 4, 1, 5};
  auto r1 = eng.generate(prompt, o);
  ASSERT_TRUE(r1);
  // Next turn: previous prompt + reply + new tokens; only the part not cached is prefilled.
  std::vector<int32_t> turn2 = prompt;
  turn2.insert(turn2.end(), r1->ids.begin(), r1->ids.end());
  turn2.insert(turn2.end(), {9, 2, 6});
  be.forward_sizes.clear();
  be.forward_positions.clear();
  auto r2 = eng.generate(turn2, o);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->stats.n_reused, 5 + 4);  // prompt + the 4 replies that were fed (the 5th never was)
  EXPECT_EQ(be.forward_positions.front(), 9);
  EXPECT_EQ(be.forward_sizes.front(), int(turn2.size()) - 9);
  EXPECT_EQ(r2->ids, reference_greedy(turn2, 5, V));
  // A diverging prompt truncates the cache; the same prompt again recomputes only its last token.
  std::vector<int32_t> other{3, 1, 8};
  auto r3 = eng.generate(other, o);
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->stats.n_reused, 2);
  EXPECT_EQ(r3->ids, reference_greedy(other, 5, V));
  auto r4 = eng.generate(other, o);
  ASSERT_TRUE(r4);
  EXPECT_EQ(r4->stats.n_reused, 2);
  EXPECT_EQ(r4->ids, r3->ids);
}

TEST(Engine, SeededSamplingIsReproducible) {
  // Random logits per position (from a hash of the sequence) so sampling has real choices.
  struct Noisy final : Backend {
    ModelConfig cfg;
    int n = 0;
    Noisy() { cfg.n_vocab = 64; }
    const char* name() const override { return "noisy"; }
    Status forward(std::span<const int32_t> t, int pos, std::span<float> logits) override {
      n = pos + int(t.size());
      std::mt19937 rng(uint32_t(n * 2654435761u + uint32_t(t.back())));
      std::normal_distribution<float> d(0.f, 2.f);
      for (auto& x : logits) x = d(rng);
      return {};
    }
    void truncate(int) override {}
    int max_context() const override { return 1000; }
    const ModelConfig& config() const override { return cfg; }
  } be;
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling.temperature = 1.f;
  o.sampling.seed = 7;
  auto a = eng.generate(std::vector<int32_t>{1}, o);
  auto b = eng.generate(std::vector<int32_t>{1}, o);
  o.sampling.seed = 8;
  auto c = eng.generate(std::vector<int32_t>{1}, o);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_NE(a->ids, c->ids);
}

TEST(Engine, BackendFailuresAndNanLogitsAreErrors) {
  FakeBackend be(10, 64, [](const auto&) { return 1; });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 10;
  be.fail_at_pos = 5;
  auto r = eng.generate(std::vector<int32_t>{1, 2}, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("injected failure"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("decode step at position 5"), std::string::npos) << r.message();
  EXPECT_TRUE(eng.cached_ids().empty());  // state reset after a failure
  be.fail_at_pos = -1;
  be.nan_logits = true;
  r = eng.generate(std::vector<int32_t>{1, 2}, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("finite"), std::string::npos);
}

TEST(Engine, ZeroNewTokensDoesNothing) {
  FakeBackend be(10, 64, [](const auto&) { return 1; });
  Engine eng(be);
  GenerateOptions o;
  o.max_new_tokens = 0;
  auto r = eng.generate(std::vector<int32_t>{1, 2}, o);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ids.empty());
  EXPECT_EQ(be.n_forward, 0);
}

}  // namespace
}  // namespace mk

namespace mk {
namespace {

// Greedy requests on a backend with on-device greedy decoding (chunks of tokens per call) give what the per-token
// host loop gives: ids, text, stop reason, and a KV cache that holds exactly the fed tokens after a stop inside
// a chunk (a follow-up turn reusing it matches a fresh run).
TEST(Engine, OnDeviceGreedyChunksEqualTheHostLoop) {
  const int V = 97;
  auto next = [&](const std::vector<int32_t>& s) { return hash_next(s, V); };
  struct Req {
    int max_new;
    std::vector<int32_t> eos;
    std::vector<std::string> stops;
    int callback_stop_after;  // 0: never
  };
  const std::vector<int32_t> prompt{4, 9, 1, 30};
  const auto ref = reference_greedy(prompt, 60, V);
  std::map<int32_t, std::string> pieces;
  for (int i = 0; i < V; ++i) pieces[i] = std::string(1, char('a' + i % 26));
  std::string stop_at = pieces[ref[21]];  // with the next piece: inside the second chunk of 16
  stop_at += pieces[ref[22]];
  for (const Req& q : {Req{37, {}, {}, 0}, Req{60, {ref[19]}, {}, 0}, Req{60, {}, {stop_at}, 0}, Req{60, {}, {}, 5},
                       Req{1, {}, {}, 0}, Req{16, {}, {}, 0}}) {
    SCOPED_TRACE(cat("max_new ", q.max_new, q.eos.empty() ? "" : " eos", q.stops.empty() ? "" : " stop string",
                     q.callback_stop_after ? " callback" : ""));
    GenerateResult got[2];
    std::vector<int32_t> cache[2];
    for (int dev = 0; dev < 2; ++dev) {
      FakeBackend be(V, 256, next);
      be.device_greedy = dev == 1;
      be.config_.eos_token_ids = q.eos;
      Engine eng(be);
      MapTextStream text(pieces);
      GenerateOptions o;
      o.max_new_tokens = q.max_new;
      o.stop_strings = q.stops;
      int n_cb = 0;
      auto r = eng.generate(prompt, o, &text, [&](std::string_view, std::span<const int32_t> ids) {
        n_cb += int(ids.size());
        return q.callback_stop_after == 0 || n_cb < q.callback_stop_after;
      });
      ASSERT_TRUE(r) << r.message();
      got[dev] = *r;
      cache[dev] = be.seq;
      EXPECT_EQ(be.seq, eng.cached_ids()) << "the backend's cache must hold exactly the engine's cached ids";
      if (dev == 1 && q.max_new > 1) {
        EXPECT_GT(be.n_decode_greedy, 0) << "the on-device path was not taken";
      }
      // A follow-up turn on the same engine reuses the cache and must match a fresh engine.
      std::vector<int32_t> turn2 = eng.cached_ids();
      turn2.insert(turn2.end(), {7, 8});
      GenerateOptions o2;
      o2.max_new_tokens = 20;
      auto again = eng.generate(turn2, o2);
      FakeBackend fresh_be(V, 256, next);
      Engine fresh(fresh_be);
      auto want = fresh.generate(turn2, o2);
      ASSERT_TRUE(again && want);
      EXPECT_EQ(again->ids, want->ids) << "follow-up turn after a stop inside a chunk";
    }
    EXPECT_EQ(got[1].ids, got[0].ids);
    EXPECT_EQ(got[1].text, got[0].text);
    EXPECT_EQ(got[1].stop, got[0].stop);
    EXPECT_EQ(cache[1], cache[0]);
  }
}

// A temperature-only request on a backend that draws on the device: the same ids as the host loop (the device
// continues the host Sampler's draw indices), the chunks taken on the device, and a follow-up request starting over.
TEST(Engine, OnDeviceSamplingEqualsHostSampling) {
  const int V = 50;
  auto next = [&](const std::vector<int32_t>& s) { return hash_next(s, V); };
  for (uint64_t seed : {1ull, 7ull, 12345ull}) {
    SCOPED_TRACE(cat("seed ", seed));
    std::vector<int32_t> ids[2];
    for (int dev = 0; dev < 2; ++dev) {
      FakeBackend be(V, 256, next);
      be.device_sample = dev == 1;
      Engine eng(be);
      GenerateOptions o;
      o.max_new_tokens = 40;  // the first token from the prefill's logits, then chunks of 16, 16 and 7 on the device
      o.sampling.temperature = 4.f;  // logits 10 / 0: the predicted token has probability ~0.13, so draws matter
      o.sampling.seed = seed;
      auto r = eng.generate(std::vector<int32_t>{3, 1, 4}, o);
      ASSERT_TRUE(r) << r.message();
      ids[dev] = r->ids;
      EXPECT_EQ(be.seq, eng.cached_ids());
      if (dev == 1) {
        EXPECT_EQ(be.n_decode_sample, 3) << "the on-device path was not taken";
        EXPECT_EQ(be.n_sample_last, 1) << "the first token is drawn on the device (Backend::sample_last)";
      }
      auto again = eng.generate(std::vector<int32_t>{3, 1, 4}, o);  // a fresh request: draws from 0 again
      ASSERT_TRUE(again);
      EXPECT_EQ(again->ids, r->ids);
    }
    EXPECT_EQ(ids[1], ids[0]);
    std::set<int32_t> distinct(ids[0].begin(), ids[0].end());
    EXPECT_GT(distinct.size(), 5u) << "the draws should spread over many ids (else this test shows little)";
  }
}

TEST(Engine, OnDeviceGreedyOnlyForPlainGreedy) {
  const int V = 50;
  for (int c = 0; c < 2; ++c) {
    FakeBackend be(V, 128, [&](const auto& s) { return hash_next(s, V); });
    be.device_greedy = true;
    Engine eng(be);
    GenerateOptions o;
    o.max_new_tokens = 10;
    if (c == 0) o.sampling.repetition_penalty = 1.3f;  // greedy, but the penalty needs the logits
    else o.sampling.temperature = 0.7f;
    ASSERT_TRUE(eng.generate(std::vector<int32_t>{1, 2}, o));
    EXPECT_EQ(be.n_decode_greedy, 0) << (c == 0 ? "repetition penalty" : "temperature");
  }
}

}  // namespace
}  // namespace mk
