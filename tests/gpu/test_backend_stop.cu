// The layered CUDA backend's stop check on the device (decode_stop.h: the until graphs' WHILE loops). A call whose
// step j chooses a stop id (the first step that chooses it) returns j + 1 and exactly the first j + 1 tokens of the
// call without stop ids (decode_greedy / decode_sample, the unchanged path), the rest -1, and caches exactly the fed
// positions: a following call that feeds the stop token continues as the reference does. Greedy, temperature and
// top-k / top-p draws; 1, 2 (the default), 3 and 8 steps per WHILE body (a stop at step 0, inside a body, at a
// body's last step, in the tail, at the call's last step), with and without the L2 prefetch at a body's end; across
// a decode-variant boundary (two until graphs in one call) against the host loop; never-matching ids; too many ids;
// no graphs. Run: test_gpu --gtest_filter='BackendStop*' (BackendStop.Small under compute-sanitizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "cpu/ops.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda_backend_fixture.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::gpu_test {
namespace {

using megakernel::test::tiny_config;

constexpr int K = 20;  // tokens per call: 2 replays of the default 8-step graph + 4 single steps on the reference path

// The steps j whose token occurs there first.
std::vector<int> first_occurrences(const std::vector<int32_t>& t) {
  std::vector<int> js;
  for (int j = 0; j < int(t.size()); ++j)
    if (std::find(t.begin(), t.begin() + j, t[size_t(j)]) == t.begin() + j) js.push_back(j);
  return js;
}

// decode_*_until with the sampling of `sp` (temperature 0: greedy), draws from first_draw.
Expected<int> until(cuda::CudaBackend& b, int32_t tok, int pos, const SamplingParams& sp, uint64_t first_draw,
                    std::span<const int32_t> stops, std::span<int32_t> out) {
  Backend& be = b;
  return sp.greedy() ? be.decode_greedy_until(tok, pos, stops, out)
                     : be.decode_sample_until(tok, pos, sp, first_draw, stops, out);
}

// Reference, never-matching ids, then a stop at every first occurrence (or the first and last), each followed by a
// continuation from the stop; also calls that end exactly at their stop.
void check_stops(cuda::CudaBackend& b, const SamplingParams& sp, bool all_js) {
  const int V = b.config().n_vocab;
  const std::vector<int32_t> prompt = random_tokens(7, V, 3);
  const int P = int(prompt.size()) - 1;
  std::vector<float> logits(static_cast<size_t>(V));
  b.truncate(0);
  ASSERT_TRUE(b.forward(std::span(prompt).first(size_t(P)), 0, logits).ok());
  const int32_t t0 = prompt[size_t(P)];
  std::vector<int32_t> ref(K);
  ASSERT_TRUE((sp.greedy() ? b.decode_greedy(t0, P, ref) : b.decode_sample(t0, P, sp, 1, ref)).ok());
  ASSERT_EQ(b.n_cached(), P + K);
  const int32_t never[] = {V, V + 100, -1};
  b.truncate(P);
  std::vector<int32_t> got(K, -9);
  auto n = until(b, t0, P, sp, 1, never, got);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_EQ(*n, K);
  EXPECT_EQ(got, ref) << "stop ids that never occur";
  EXPECT_EQ(b.n_cached(), P + K);
  std::vector<int> js = first_occurrences(ref);
  ASSERT_FALSE(js.empty());
  if (!all_js) js = {js.front(), js.back()};
  for (int j : js) {
    SCOPED_TRACE(cat("stop at step ", j));
    b.truncate(P);
    const int32_t stop[] = {V + 7, ref[size_t(j)]};
    std::fill(got.begin(), got.end(), -9);
    auto m = until(b, t0, P, sp, 1, stop, got);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_EQ(*m, j + 1);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + j + 1, ref.begin()));
    EXPECT_TRUE(std::all_of(got.begin() + j + 1, got.end(), [](int32_t t) { return t == -1; }));
    EXPECT_EQ(b.n_cached(), P + j + 1) << "the stop id is not fed";
    // The cache holds P + j + 1 positions: feed the stop token there (draws on from j + 1), with stop ids that never
    // occur (the until graphs again) and then without (the reference path).
    if (j + 1 < K) {
      std::vector<int32_t> rest(size_t(K - j - 1), -9);
      auto r = until(b, ref[size_t(j)], P + j + 1, sp, uint64_t(j + 2), never, rest);
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(*r, K - j - 1);
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ref.begin() + j + 1)) << "continuation after the stop";
      b.truncate(P + j + 1);
      auto r2 = until(b, ref[size_t(j)], P + j + 1, sp, uint64_t(j + 2), {}, rest);
      ASSERT_TRUE(r2.ok()) << r2.message();
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ref.begin() + j + 1)) << "continuation without stop ids";
    }
    // A call of exactly j + 1 tokens whose last one is the stop id.
    b.truncate(P);
    std::vector<int32_t> exact(size_t(j + 1), -9);
    auto e = until(b, t0, P, sp, 1, stop, exact);
    ASSERT_TRUE(e.ok()) << e.message();
    EXPECT_EQ(*e, j + 1);
    EXPECT_TRUE(std::equal(exact.begin(), exact.end(), ref.begin())) << "a call that stops at its last step";
  }
}

SamplingParams temperature(float t, uint64_t seed, int top_k = 0, float top_p = 1.f) {
  SamplingParams p;
  p.temperature = t, p.seed = seed, p.top_k = top_k, p.top_p = top_p;
  return p;
}

TEST(BackendStop, StopAtStepJEqualsPrefixAndContinues) {
  const ModelConfig configs[] = {tiny_config(Family::Llama, 4, 2, 64, 128, 256, 2, 3001),
                                 tiny_config(Family::Qwen3, 4, 1, 128, 96, 200, 2, 5003, true)};
  uint64_t seed = 40;
  for (const ModelConfig& c : configs) {
    Model m = make_random_model(c, DType::BF16, seed++);
    for (int S : {1, 2, 3, 8}) {
      cuda::CudaBackendOptions opt;
      opt.stop_graph_steps = S;
      opt.stop_prefetch = S != 3;  // the L2 prefetch of the next body's weights changes no result
      auto b = make_layered(m, 128, opt);
      ASSERT_TRUE(b);
      for (const SamplingParams& sp : {SamplingParams{}, temperature(1.5f, seed * 7), temperature(1.f, 9, 40, 0.9f)}) {
        SCOPED_TRACE(cat(c.architecture, ", ", S, " steps per WHILE body, temperature ", sp.temperature, " top_k ",
                         sp.top_k, " top_p ", sp.top_p));
        check_stops(*b, sp, true);
      }
      EXPECT_TRUE(b->stop_body_pdl()) << "the driver refused PDL inside the WHILE bodies (slower)";
    }
  }
}

// One sampled draw over one block (CudaBackendOptions::sample_blocks = 1: finish_step_kernel, not the grid kernel).
TEST(BackendStop, OneBlockFinishKernel) {
  Model m = make_random_model(tiny_config(Family::Qwen2, 4, 2, 64, 96, 160, 2, 2000), DType::BF16, 12);
  cuda::CudaBackendOptions opt;
  opt.sample_blocks = 1;
  auto b = make_layered(m, 64, opt);
  ASSERT_TRUE(b);
  check_stops(*b, SamplingParams{}, false);
  check_stops(*b, temperature(1.2f, 5), false);
}

// Small enough for compute-sanitizer.
TEST(BackendStop, Small) {
  Model m = make_random_model(tiny_config(Family::Llama, 4, 2, 64, 64, 128, 1, 1000), DType::BF16, 5);
  for (int S : {1, 3}) {
    cuda::CudaBackendOptions opt;
    opt.stop_graph_steps = S;
    opt.stop_prefetch = S == 1;
    auto b = make_layered(m, 48, opt);
    ASSERT_TRUE(b);
    SCOPED_TRACE(cat(S, " steps per WHILE body, L2 prefetch ", opt.stop_prefetch));
    check_stops(*b, SamplingParams{}, false);
    check_stops(*b, temperature(1.5f, 3), false);
  }
}

// From position 250 for 24 tokens: the steps cross the 256-position variant boundary (two until graphs in one call).
// Greedy tokens equal the host loop's (forward per token: the same variant per position); a stop after the boundary
// ends the call there; a stop before it leaves the second graph running nothing.
TEST(BackendStop, AcrossDecodeVariantsEqualsHostLoop) {
  const ModelConfig c = tiny_config(Family::Llama, 4, 2, 64, 128, 256, 2, 640);
  Model m = make_random_model(c, DType::BF16, 6);
  for (int S : {1, 3}) {
    cuda::CudaBackendOptions opt;
    opt.stop_graph_steps = S;
    auto a = make_layered(m, 4096, opt), h = make_layered(m, 4096);
    ASSERT_TRUE(a && h);
    if (a->decode_attention_splits(250) == a->decode_attention_splits(4096)) GTEST_SKIP() << "one decode variant only";
    const std::vector<int32_t> prompt = random_tokens(251, c.n_vocab, 7);
    std::vector<float> l(size_t(c.n_vocab), 0.f);
    for (auto* g : {a.get(), h.get()}) ASSERT_TRUE(g->forward(std::span(prompt).first(250), 0, l).ok());
    std::vector<int32_t> host(24);
    int32_t tok = prompt[250];
    for (int i = 0; i < 24; ++i) {
      ASSERT_TRUE(h->forward(std::vector<int32_t>{tok}, 250 + i, l).ok());
      host[size_t(i)] = tok = cpu::argmax(l.data(), c.n_vocab);
    }
    const int32_t never[] = {c.n_vocab};
    std::vector<int32_t> dev(24, -9);
    auto n = a->decode_greedy_until(prompt[250], 250, never, dev);
    ASSERT_TRUE(n.ok()) << n.message();
    EXPECT_EQ(*n, 24);
    EXPECT_EQ(dev, host);
    for (int j : first_occurrences(host)) {
      SCOPED_TRACE(cat(S, " steps per body, stop at step ", j, " (position ", 251 + j, ")"));
      a->truncate(250);
      const int32_t stop[] = {host[size_t(j)]};
      auto s = a->decode_greedy_until(prompt[250], 250, stop, dev);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(*s, j + 1);
      EXPECT_TRUE(std::equal(dev.begin(), dev.begin() + j + 1, host.begin()));
      EXPECT_EQ(a->n_cached(), 250 + j + 1);
    }
  }
}

// After a stop at the first step of a long call, the call's other steps do not run: it takes a fraction of the time
// of the call without a stop (1 step of 128 with one-step bodies, at most 2 with the default 2-step bodies, at most 8
// with 8-step bodies).
TEST(BackendStop, StepsAfterTheStopCostNothing) {
  const ModelConfig c = tiny_config(Family::Llama, 8, 2, 64, 512, 1024, 4, 4000);
  Model m = make_random_model(c, DType::BF16, 21);
  for (int S : {1, 2, 8}) {
    cuda::CudaBackendOptions opt;
    opt.stop_graph_steps = S;
    auto b = make_layered(m, 512, opt);
    ASSERT_TRUE(b);
    std::vector<int32_t> out(128);
    const int32_t never[] = {c.n_vocab};
    auto full = b->decode_greedy_until(1, 0, never, out);  // warm-up (builds the until graphs)
    ASSERT_TRUE(full.ok()) << full.message();
    const int32_t stop[] = {out[0]};
    auto time_call = [&](std::span<const int32_t> ids, int want) {
      double best = 1e30;
      for (int r = 0; r < 3; ++r) {
        b->truncate(0);
        const auto t0 = std::chrono::steady_clock::now();
        auto k = b->decode_greedy_until(1, 0, ids, out);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_TRUE(k.ok() && *k == want) << (k ? cat(*k) : k.message());
        best = std::min(best, ms);
      }
      return best;
    };
    const double t_full = time_call(never, 128), t_stop = time_call(stop, 1);
    SCOPED_TRACE(cat(S, " steps per body: ", t_stop, " ms stopping at step 0 vs ", t_full, " ms for 128 steps"));
    EXPECT_LT(t_stop, t_full * (S <= 2 ? 0.1 : 0.3));
  }
}

// The Backend interface: max_stop_ids, too many ids, no stop ids (the plain decode), no graphs.
TEST(BackendStop, BackendInterface) {
  const ModelConfig c = tiny_config(Family::Qwen2, 6, 2, 64, 96, 160, 2, 2000);
  Model m = make_random_model(c, DType::BF16, 8);
  auto b = make_layered(m, 64);
  ASSERT_TRUE(b);
  Backend& be = *b;
  EXPECT_EQ(be.max_stop_ids(), cuda::MAX_DECODE_STOP_IDS);
  std::vector<float> logits(size_t(c.n_vocab));
  ASSERT_TRUE(be.forward(std::vector<int32_t>{3, 14, 15, 92, 65}, 0, logits).ok());
  std::vector<int32_t> ref(12), out(12);
  ASSERT_TRUE(be.decode_greedy(5, 5, ref).ok());
  be.truncate(5);
  auto n = be.decode_greedy_until(5, 5, {}, out);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_EQ(*n, 12);
  EXPECT_EQ(out, ref) << "no stop ids";
  be.truncate(5);
  const std::vector<int32_t> many(size_t(cuda::MAX_DECODE_STOP_IDS + 1), 3);
  auto bad = be.decode_greedy_until(5, 5, many, out);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("stop ids"), std::string::npos) << bad.message();
  auto bad_s = be.decode_sample_until(5, 5, temperature(1.f, 1), 0, many, out);
  ASSERT_FALSE(bad_s.ok());
  const std::vector<int32_t> max_ids(size_t(cuda::MAX_DECODE_STOP_IDS), c.n_vocab + 3);
  auto ok = be.decode_greedy_until(5, 5, max_ids, out);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(out, ref) << "16 stop ids that never occur";
  EXPECT_FALSE(be.decode_greedy_until(5, 7, max_ids, out).ok()) << "the cache holds 17 positions, not 7";

  cuda::CudaBackendOptions eager;
  eager.graph = false;
  auto e = make_layered(m, 64, eager);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->max_stop_ids(), 0);
  ASSERT_TRUE(e->forward(std::vector<int32_t>{3, 14, 15, 92, 65}, 0, logits).ok());
  const int32_t one[] = {ref[3]};
  auto refused = e->decode_greedy_until(5, 5, one, out);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("graph"), std::string::npos) << refused.message();
  auto plain = e->decode_greedy_until(5, 5, {}, out);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(out, ref) << "eager decode without stop ids";
}

}  // namespace
}  // namespace mk::gpu_test
