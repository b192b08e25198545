// The first token of a sampled request drawn on the device (Backend::sample_last) and the megakernel backend's top-k /
// top-p decode on its layered backend. Against the host Sampler on the same logits (the forward's, copied to the host,
// and crafted ones through CudaBackend::sample_logits): temperature, top-k, top-p, min-p and mixes, several draw
// indices, 64 blocks and one; the megakernel's two logits buffers (the layered prefill's, its own 1-token step's);
// refusals; greedy: the forward's argmax, after forward and after forward_on_device. The megakernel's top-k / top-p
// decode equals the host loop on a layered backend of the same options (same kernels, so the same logits), stop ids
// included, and the engine's tokens through it equal the all-host loop's.
// Run: test_gpu --gtest_filter='SampleLast*'
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "cuda/backend/cuda_backend.h"
#include "gpu_test_util.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/engine.h"
#include "megakernel/model.h"
#include "megakernel_fixture.h"
#include "runtime/sampler.h"
#include "sampling_loop.h"
#include "../megakernel/mk_test_util.h"

namespace mk::gpu_test {
namespace {

constexpr int CTX = 96;

const std::vector<SamplingParams>& rules() {
  static const std::vector<SamplingParams> r = {{.temperature = 1.3f, .seed = 1},
                                                {.temperature = 1.f, .top_k = 20, .seed = 2},
                                                {.temperature = 1.f, .top_p = 0.7f, .seed = 3},
                                                {.temperature = 0.8f, .min_p = 0.1f, .seed = 4},
                                                {.temperature = 2.f, .top_k = 300, .top_p = 0.5f, .min_p = 0.02f, .seed = 5},
                                                {.temperature = 0.7f, .top_k = 3, .top_p = 0.95f, .seed = 6}};
  return r;
}

std::string rule_name(const SamplingParams& p) {
  return cat("T ", p.temperature, " top_k ", p.top_k, " top_p ", p.top_p, " min_p ", p.min_p);
}

int32_t host_draw(const SamplingParams& p, uint64_t draw, std::vector<float> logits) {
  Sampler s(p);
  s.advance(draw);
  return s.sample(logits, {});
}

std::unique_ptr<cuda::CudaBackend> layered(const Model& m, cuda::CudaBackendOptions opt = {}) {
  auto w = cuda::upload_weights(m.config, m.weights, /*rope_pair_rows=*/false);  // the megakernel's layered prefill's
  EXPECT_TRUE(w) << w.message();
  if (!w) return nullptr;
  auto b = cuda::CudaBackend::create(m.config, std::move(*w), CTX, opt);
  EXPECT_TRUE(b) << b.message();
  return b ? std::move(*b) : nullptr;
}

std::unique_ptr<megakernel::MegakernelBackend> mk_with_layered(const Model& m) {
  auto w = cuda::upload_weights(m.config, m.weights);
  EXPECT_TRUE(w) << w.message();
  if (!w) return nullptr;
  auto b = megakernel::MegakernelBackend::create(m.config, std::move(*w), CTX, {});  // layered_prefill on
  EXPECT_TRUE(b) << b.message();
  return b ? std::move(*b) : nullptr;
}

// The draw after `feed` at pos equals the host Sampler's on the logits forward returned, for every rule and draw.
void expect_last_equals_host(Backend& b, std::span<const int32_t> feed, int pos, const char* what) {
  SCOPED_TRACE(what);
  std::vector<float> l(size_t(b.config().n_vocab));
  ASSERT_TRUE(b.forward(feed, pos, l).ok());
  std::set<int32_t> seen;
  int n_draws = 0;
  for (const SamplingParams& p : rules()) {
    if (!b.can_decode_sample(p)) continue;
    for (uint64_t draw : {0ull, 1ull, 17ull, 123456789ull}) {
      auto id = b.sample_last(p, draw);
      ASSERT_TRUE(id) << rule_name(p) << ": " << id.message();
      EXPECT_EQ(*id, host_draw(p, draw, l)) << rule_name(p) << " draw " << draw;
      seen.insert(*id);
      ++n_draws;
    }
  }
  EXPECT_GE(n_draws, 8);
  EXPECT_GT(seen.size(), size_t(n_draws / 3)) << "the draws should spread (else this test shows little)";
}

// Greedy: the forward's argmax on the device (sample_last) equals the host's argmax of the logits forward returned,
// after forward and after forward_on_device (the same kernels over the same cache positions, logits not copied).
void expect_greedy_last_equals_host(Backend& b, std::span<const int32_t> feed, int pos, const char* what) {
  SCOPED_TRACE(what);
  std::vector<float> l(size_t(b.config().n_vocab));
  ASSERT_TRUE(b.forward(feed, pos, l).ok());
  const int32_t want = argmax(l);
  auto got = b.sample_last(SamplingParams{}, 0);
  ASSERT_TRUE(got) << got.message();
  EXPECT_EQ(*got, want) << "after forward";
  b.truncate(pos);
  ASSERT_TRUE(b.forward_on_device(feed, pos).ok());
  auto again = b.sample_last(SamplingParams{}, 5);  // the draw index means nothing to greedy
  ASSERT_TRUE(again) << again.message();
  EXPECT_EQ(*again, want) << "after forward_on_device";
}

const ModelConfig& llama_cfg() {
  static const ModelConfig c = megakernel::test::tiny_config(Family::Llama, 4, 2, 64, 128, 344, 2, 5003, false);
  return c;
}

TEST(SampleLast, LayeredDrawEqualsHostSamplerOnCraftedLogits) {
  const ModelConfig c = megakernel::test::tiny_config(Family::Llama, 4, 2, 64, 128, 344, 2, 128256, true);
  Model m = make_random_model(c, DType::BF16, 3);
  cuda::CudaBackendOptions one;
  one.sample_blocks = 1;
  auto b = layered(m), b1 = layered(m, one);
  ASSERT_TRUE(b && b1);
  std::mt19937 rng(11);
  for (float sigma : {1.f, 4.f}) {  // flat, and spiky enough that min-p / top-p cut hard
    std::vector<float> h = randn(size_t(c.n_vocab), rng, sigma);
    if (sigma > 1.f) h[7] = -INFINITY, h[100] = NAN, h[5000] = -INFINITY;  // dropped candidates
    DeviceArray<float> d(h);
    std::set<int32_t> seen;
    for (const SamplingParams& p : rules())
      for (uint64_t draw : {0ull, 3ull, 99ull}) {
        SCOPED_TRACE(cat("sigma ", sigma, " ", rule_name(p), " draw ", draw));
        const int32_t want = host_draw(p, draw, h);
        auto got = b->sample_logits(d.p, p, draw), got1 = b1->sample_logits(d.p, p, draw);
        ASSERT_TRUE(got && got1) << got.message() << got1.message();
        EXPECT_EQ(*got, want) << "64 blocks";
        EXPECT_EQ(*got1, want) << "one block";
        seen.insert(want);
      }
    EXPECT_GT(seen.size(), 8u);
  }
  std::vector<float> none(size_t(c.n_vocab), NAN);
  DeviceArray<float> dn(none);
  auto bad = b->sample_logits(dn.p, rules()[2], 0);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("finite"), std::string::npos) << bad.message();
}

TEST(SampleLast, LayeredAfterPrefillAndStepEqualsHostSampler) {
  Model m = make_random_model(llama_cfg(), DType::BF16, 5);
  auto b = layered(m);
  ASSERT_TRUE(b);
  const auto prompt = random_tokens(13, llama_cfg().n_vocab, 7);
  expect_last_equals_host(*b, prompt, 0, "after a 13-token prefill");
  expect_last_equals_host(*b, std::span(prompt).first(1), 13, "after a 1-token step");
  SamplingParams penalty = rules()[0];
  penalty.repetition_penalty = 1.1f;
  EXPECT_FALSE(b->sample_last(penalty, 0)) << "a repetition penalty is applied on the host";
  b->truncate(0);
  expect_greedy_last_equals_host(*b, prompt, 0, "greedy after a 13-token prefill");
  expect_greedy_last_equals_host(*b, std::span(prompt).first(1), 13, "greedy after a 1-token step");
}

TEST(SampleLast, MegakernelBothLogitsBuffersEqualHostSampler) {
  for (const ModelConfig& c : {llama_cfg(), megakernel::test::tiny_config(Family::Qwen3, 8, 1, 128, 120, 104, 2, 9001, true)}) {
    SCOPED_TRACE(c.architecture);
    Model m = make_random_model(c, DType::BF16, 9);
    auto mk = mk_with_layered(m);
    ASSERT_TRUE(mk);
    const auto prompt = random_tokens(11, c.n_vocab, 8);
    expect_last_equals_host(*mk, prompt, 0, "layered prefill's logits");
    expect_last_equals_host(*mk, std::span(prompt).first(1), 11, "the megakernel's 1-token step");
    mk->truncate(0);
    expect_greedy_last_equals_host(*mk, prompt, 0, "greedy, layered prefill");
    expect_greedy_last_equals_host(*mk, std::span(prompt).first(1), 11, "greedy, the megakernel's 1-token step");
    std::vector<int32_t> out(2);
    ASSERT_TRUE(mk->decode_greedy(3, 12, out).ok());
    auto stale = mk->sample_last(rules()[0], 0);
    ASSERT_FALSE(stale) << "a decode replaced the forward's logits";
    EXPECT_NE(stale.message().find("last forward"), std::string::npos) << stale.message();
    // Without the layered backend: temperature / min-p from the megakernel's own logits; top-k / top-p refused.
    auto alone = megakernel::make_mk(m, CTX, {});
    ASSERT_TRUE(alone);
    expect_last_equals_host(*alone, prompt, 0, "no layered prefill");
    alone->truncate(0);
    expect_greedy_last_equals_host(*alone, prompt, 0, "greedy, no layered prefill");
    EXPECT_FALSE(alone->can_decode_sample(rules()[2]));
    EXPECT_FALSE(alone->sample_last(rules()[2], 0));
  }
}

// Top-k / top-p on the megakernel backend run on its layered backend: the host loop of a layered backend with the
// same options (the same kernels: equal logits) gives the same tokens; with a stop id, the call ends there and the
// cache holds exactly what was fed (a continuation equals the unstopped run).
TEST(SampleLast, MegakernelTopKTopPDecodeEqualsHostLoop) {
  Model m = make_random_model(llama_cfg(), DType::BF16, 12);
  const auto prompt = random_tokens(10, llama_cfg().n_vocab, 4);
  for (const SamplingParams& p : rules()) {
    if (p.top_k == 0 && p.top_p >= 1.f) continue;  // the megakernel's own Argmax draws those (test_megakernel_sample)
    SCOPED_TRACE(rule_name(p));
    auto mk = mk_with_layered(m);
    auto ref = layered(m);
    ASSERT_TRUE(mk && ref);
    ASSERT_TRUE(mk->can_decode_sample(p));
    ASSERT_FALSE(mk->draws_in_argmax(p));
    std::vector<float> l(size_t(llama_cfg().n_vocab));
    ASSERT_TRUE(mk->forward(std::span(prompt).first(9), 0, l).ok());
    ASSERT_TRUE(ref->forward(std::span(prompt).first(9), 0, l).ok());
    std::vector<int32_t> dev(40, -1);
    ASSERT_TRUE(mk->decode_sample(prompt[9], 9, p, 5, dev).ok());  // draws 5, 6, ...
    expect_host_sampling_loop(*ref, p, 5, prompt[9], 9, dev, l);
    std::set<int32_t> distinct(dev.begin(), dev.end());
    EXPECT_GT(distinct.size(), 2u) << "the draws should spread";
    // A stop id at its first occurrence (past a piece of 16 when it first occurs there).
    const int32_t stop_id = dev[21];
    const int at = int(std::find(dev.begin(), dev.end(), stop_id) - dev.begin());
    mk->truncate(9);
    std::vector<int32_t> got(40, -7);
    const int32_t stops[2] = {llama_cfg().n_vocab - 1 == stop_id ? 0 : llama_cfg().n_vocab - 1, stop_id};
    auto n = mk->decode_sample_until(prompt[9], 9, p, 5, stops, got);
    ASSERT_TRUE(n) << n.message();
    const auto other = std::find(dev.begin(), dev.end(), stops[0]);
    const int want_n = std::min(at, int(other - dev.begin())) + 1;
    ASSERT_EQ(*n, want_n);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + *n, dev.begin()));
    std::vector<int32_t> rest(size_t(40 - *n));
    ASSERT_TRUE(mk->decode_sample(got[size_t(*n - 1)], 9 + *n, p, 5 + uint64_t(*n), rest).ok())
        << "the cache must hold 9 + n positions";
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), dev.begin() + *n)) << "continuation after the stop";
  }
}

// The engine through the megakernel backend with top-p (first token: sample_last from the layered prefill's logits;
// then the layered decode) gives the all-host loop's tokens (a backend that only forwards: the engine samples each
// token on the host from the layered backend's logits).
TEST(SampleLast, EngineOnMegakernelTopPEqualsAllHostLoop) {
  struct HostOnly final : Backend {
    Backend& b;
    explicit HostOnly(Backend& x) : b(x) {}
    const char* name() const override { return "host-only"; }
    Status forward(std::span<const int32_t> t, int pos, std::span<float> l) override { return b.forward(t, pos, l); }
    void truncate(int pos) override { b.truncate(pos); }
    int max_context() const override { return b.max_context(); }
    const ModelConfig& config() const override { return b.config(); }
  };
  Model m = make_random_model(llama_cfg(), DType::BF16, 13);
  auto mk = mk_with_layered(m);
  auto ref = layered(m);
  ASSERT_TRUE(mk && ref);
  HostOnly host(*ref);
  const auto prompt = random_tokens(9, llama_cfg().n_vocab, 21);
  for (const SamplingParams& p : {rules()[2], rules()[4], rules()[0]}) {
    SCOPED_TRACE(rule_name(p));
    GenerateOptions o;
    o.max_new_tokens = 50;
    o.ignore_eos = true;
    o.sampling = p;
    Engine e_mk(*mk), e_host(host);
    auto a = e_mk.generate(prompt, o);
    auto want = e_host.generate(prompt, o);
    ASSERT_TRUE(a && want) << a.message() << want.message();
    if (p.top_p < 1.f || p.top_k > 0) EXPECT_EQ(a->ids, want->ids);
    else EXPECT_EQ(a->ids[0], want->ids[0]) << "the first token (the megakernel's own logits differ after it)";
  }
}

}  // namespace
}  // namespace mk::gpu_test
