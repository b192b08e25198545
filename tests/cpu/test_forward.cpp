// CpuBackend / Forward behaviour beyond the golden numbers: argument errors are statuses naming the
// argument, truncate() rewinds, batched prefill equals token-by-token, every op is tried for every
// dtype, and the activation hook names the tensors in order. Run: build/test_cpu --gtest_filter='CpuBackend*'
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "megakernel/model.h"

namespace mk {
namespace {

ModelConfig tiny_config(Family family) {
  ModelConfig c;
  c.architecture = family == Family::Qwen3 ? "Qwen3ForCausalLM" : family == Family::Qwen2 ? "Qwen2ForCausalLM"
                                                                                          : "LlamaForCausalLM";
  c.family = family;
  c.n_vocab = 97;
  c.n_embd = 40;
  c.n_ff = 56;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.max_position = 64;
  c.qkv_bias = family == Family::Qwen2;
  c.qk_norm = family == Family::Qwen3;
  return c;
}

std::vector<float> run(Backend& b, const std::vector<int32_t>& tokens, int pos) {
  std::vector<float> logits(static_cast<size_t>(b.config().n_vocab), NAN);
  Status s = b.forward(tokens, pos, logits);
  EXPECT_TRUE(s.ok()) << s.message();
  return logits;
}

TEST(CpuBackend, RejectsBadArgumentsWithNamedErrors) {
  Model m = make_random_model(tiny_config(Family::Llama), DType::BF16, 1);
  auto b = make_cpu_backend(m, 8);
  std::vector<float> logits(97);
  auto expect_error = [&](std::vector<int32_t> toks, int pos, std::span<float> out, const std::string& needle) {
    Status s = b->forward(toks, pos, out);
    ASSERT_FALSE(s.ok()) << "expected an error mentioning '" << needle << "'";
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_error({}, 0, logits, "no tokens");
  expect_error({1, 2}, 1, logits, "positions are cached");
  expect_error({1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, logits, "context length of 8");
  expect_error({1, 97}, 0, logits, "token id 97");
  expect_error({-1}, 0, logits, "token id -1");
  expect_error({1}, 0, std::span<float>(logits).first(10), "n_vocab = 97");
  // Nothing was cached by the failed calls.
  EXPECT_EQ(static_cast<CpuBackend&>(*b).n_cached(), 0);
  run(*b, {1, 2, 3, 4, 5, 6, 7, 8}, 0);  // exactly the context fits
  expect_error({1}, 8, logits, "context length");
}

TEST(CpuBackend, PrefillTruncateAndRerunAgreeForEveryFamilyAndDtype) {
  for (Family f : {Family::Llama, Family::Qwen2, Family::Qwen3}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      Model m = make_random_model(tiny_config(f), dt, 7);
      auto b = make_cpu_backend(m, 32);
      std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
      auto all = run(*b, prompt, 0);
      for (float v : all) ASSERT_TRUE(std::isfinite(v));
      // Token by token gives the same logits, bit for bit.
      b->truncate(0);
      std::vector<float> step;
      for (size_t i = 0; i < prompt.size(); ++i) step = run(*b, {prompt[i]}, int(i));
      EXPECT_EQ(step, all);
      // Rewinding to 5 and replaying the tail reproduces the end.
      b->truncate(5);
      EXPECT_EQ(run(*b, {prompt.begin() + 5, prompt.end()}, 5), all);
      // A different history gives different logits (the cache is really read).
      b->truncate(2);
      EXPECT_NE(run(*b, {1, 2, 3, 4, 5, 79}, 2), all);
    }
  }
}

TEST(CpuBackend, HookNamesEveryActivationInOrder) {
  Model m = make_random_model(tiny_config(Family::Qwen3), DType::F32, 3);
  CpuBackend b(m, 16);
  std::vector<std::string> seen;
  b.set_hook([&](std::string_view name, int layer, int pos, std::span<const float> v) {
    EXPECT_EQ(pos, 0);
    EXPECT_FALSE(v.empty());
    seen.push_back(cat(name, "@", layer));
  });
  run(b, {5}, 0);
  std::vector<std::string> want = {"embd@-1"};
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"attn_norm", "q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope", "attn", "attn_out",
                          "h_attn", "mlp_norm", "gate", "up", "act", "mlp_out", "h"})
      want.push_back(cat(n, "@", l));
  want.push_back("final_norm@-1");
  want.push_back("logits@-1");
  EXPECT_EQ(seen, want);
}

TEST(CpuBackend, TiedHeadUsesTheEmbedding) {
  ModelConfig c = tiny_config(Family::Llama);
  c.tie_word_embeddings = true;
  Model m = make_random_model(c, DType::F32, 11);
  CpuBackend b(m, 16);
  std::vector<float> final_norm;
  b.set_hook([&](std::string_view name, int, int, std::span<const float> v) {
    if (name == "final_norm") final_norm.assign(v.begin(), v.end());
  });
  auto logits = run(b, {42}, 0);
  const TensorView& e = m.weights.tok_embd;
  for (int t : {0, 42, 96}) {
    double ref = 0;
    for (int i = 0; i < c.n_embd; ++i) ref += double(e.at(size_t(t * c.n_embd + i))) * final_norm[size_t(i)];
    EXPECT_NEAR(logits[size_t(t)], ref, 1e-4 * (1 + std::abs(ref)));
  }
}

}  // namespace
}  // namespace mk
