// The megakernel backend's prefill, both ways: MegakernelOptions::layered_prefill (the default; the prompt runs on
// the layered path's prefill over the same weights and KV cache, then the megakernel decodes from that cache) and
// one megakernel step per prompt token. Against the CPU reference: the
// prompt's logits, teacher-forced decode steps, and greedy decoding with K steps per launch; a second prompt that
// extends the first (the cache reused across the two backends).
// Run: test_gpu --gtest_filter='MegakernelPrefill*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::megakernel {
namespace {

constexpr double LOGITS_TOL = 3e-2;  // bf16 K/V cache vs the CPU's fp32 cache
constexpr double TIE = 2e-2;

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_LT(gpu_test::rel_err(got, want), LOGITS_TOL);
  const int32_t g = argmax(got), w = argmax(want);
  if (g != w) EXPECT_LT(want[size_t(w)] - want[size_t(g)], TIE * std::max(1.f, std::fabs(want[size_t(w)])));
}

void prefill_then_decode(bool layered) {
  struct Case {
    const char* name;
    ModelConfig c;
  };
  for (const Case& k : {Case{"llama hd64 gqa4", test::tiny_config(Family::Llama, 8, 2, 64, 200, 344, 3, 509, false)},
                        Case{"qwen2 hd64 gqa6 bias", test::tiny_config(Family::Qwen2, 6, 1, 64, 72, 232, 3, 509, false)},
                        Case{"qwen3 hd128 gqa8 tied", test::tiny_config(Family::Qwen3, 8, 1, 128, 120, 104, 3, 509, true)}}) {
    SCOPED_TRACE(cat(k.name, layered ? ", layered prefill" : ", megakernel prefill"));
    Model m = make_random_model(k.c, DType::BF16, 21);
    auto w = cuda::upload_weights(m.config, m.weights);
    ASSERT_TRUE(w) << w.message();
    MegakernelOptions opt;
    opt.layered_prefill = layered;
    auto mk = MegakernelBackend::create(m.config, std::move(*w), 128, opt);
    ASSERT_TRUE(mk) << mk.message();
    CpuBackend cpu(m, 128);
    const int V = m.config.n_vocab;
    std::vector<float> lg(static_cast<size_t>(V)), lc(static_cast<size_t>(V));
    std::vector<int32_t> prompt(23);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 5) % size_t(V));
    ASSERT_TRUE((*mk)->forward(prompt, 0, lg).ok());
    ASSERT_TRUE(cpu.forward(prompt, 0, lc).ok());
    {
      SCOPED_TRACE("prompt");
      expect_close(lg, lc);
    }
    int pos = int(prompt.size());
    for (int step = 0; step < 8; ++step) {  // teacher-forced decode steps on the megakernel
      SCOPED_TRACE(cat("decode step ", step));
      const int32_t t = argmax(lc);
      ASSERT_TRUE((*mk)->forward(std::span(&t, 1), pos, lg).ok());
      ASSERT_TRUE(cpu.forward(std::span(&t, 1), pos, lc).ok());
      expect_close(lg, lc);
      ++pos;
    }
    // A second prompt chunk on top (the layered prefill again, after megakernel steps), then greedy with 4 steps
    // per launch against the CPU's greedy tokens (up to the first near-tie).
    const std::vector<int32_t> more = {3, 14, 15, 92, 65};
    ASSERT_TRUE((*mk)->forward(more, pos, lg).ok());
    ASSERT_TRUE(cpu.forward(more, pos, lc).ok());
    {
      SCOPED_TRACE("second prompt chunk");
      expect_close(lg, lc);
    }
    pos += int(more.size());
    std::vector<int32_t> out(12, -1);
    int32_t t = argmax(lc);
    ASSERT_TRUE((*mk)->generate_greedy(t, pos, out, 4).ok());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(cpu.forward(std::span(&t, 1), pos + int(i), lc).ok());
      std::vector<float> top(lc);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      if (top[0] - top[1] < TIE * std::max(1.f, std::fabs(top[0]))) break;
      t = argmax(lc);
      ASSERT_EQ(out[i], t) << "greedy token " << i;
    }
  }
}

TEST(MegakernelPrefill, LayeredPrefillThenMegakernelDecodeMatchesCpu) { prefill_then_decode(true); }
TEST(MegakernelPrefill, MegakernelStepsPrefillThenDecodeMatchesCpu) { prefill_then_decode(false); }

}  // namespace
}  // namespace mk::megakernel
