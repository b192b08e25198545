// ActivationTrace: two identical runs agree; a perturbed weight is reported at the first tensor it
// touches (and not before); NaN and missing tensors are named. Run: build/test_cpu --gtest_filter='ActivationTrace*'
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/activation_trace.h"
#include "cpu/cpu_backend.h"
#include "megakernel/model.h"

namespace mk::cpu {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.n_vocab = 61;
  c.n_embd = 32;
  c.n_ff = 48;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = 1;
  c.head_dim = 8;
  c.max_position = 32;
  return c;
}

ActivationTrace trace_of(const Model& m, const std::vector<int32_t>& tokens) {
  ActivationTrace t;
  CpuBackend b(m, 16);
  b.set_hook(t.hook());
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  EXPECT_TRUE(b.forward(tokens, 0, logits).ok());
  return t;
}

TEST(ActivationTrace, NamesTheFirstTensorAPerturbedWeightTouches) {
  Model m = make_random_model(small_config(), DType::F32, 5);
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5};
  ActivationTrace want = trace_of(m, tokens);
  EXPECT_FALSE(first_divergence(trace_of(m, tokens), want, 0.0)) << "identical runs must agree exactly";

  // Perturb one up-projection weight of layer 1 (the storage is owned by the model: cast is fine here).
  float* up = static_cast<float*>(const_cast<void*>(m.weights.layers[1].w_up.data));
  up[7] += 0.5f;
  auto d = first_divergence(trace_of(m, tokens), want, 1e-6);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, "up");
  EXPECT_EQ(d->layer, 1);
  EXPECT_EQ(d->pos, 0);
  EXPECT_NE(d->describe().find("'up' of layer 1 at position 0"), std::string::npos) << d->describe();
}

TEST(ActivationTrace, ReportsNanAndMissing) {
  Model m = make_random_model(small_config(), DType::BF16, 6);
  ActivationTrace want = trace_of(m, {2, 7});
  ActivationTrace got = want;
  got.entries[3].values[1] = NAN;
  auto d = first_divergence(got, want, 1.0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, want.entries[3].name);
  EXPECT_NE(d->reason.find("NaN"), std::string::npos);
  got = want;
  got.entries.erase(got.entries.begin() + 5);
  d = first_divergence(got, want, 1.0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reason, "missing");
  EXPECT_EQ(d->name, want.entries[5].name);
}

}  // namespace
}  // namespace mk::cpu
