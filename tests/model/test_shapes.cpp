// Named shapes and random models: published parameter counts, decode bytes per token, determinism and
// value ranges of make_random_model.
#include <cmath>
#include <cstring>

#include "model/config.h"
#include "model/weight_slots.h"
#include "model_test_util.h"

namespace mk {
namespace {

uint64_t count_from_shapes(const ModelConfig& c) {
  Weights w;
  uint64_t n = 0;
  for (const auto& s : weight_slots(c, w)) {
    uint64_t k = 1;
    for (auto d : s.shape) k *= uint64_t(d);
    n += k;
  }
  return n;
}

TEST(Shapes, PublishedParameterCounts) {
  // Parameter counts of the Hugging Face releases (hub safetensors metadata). Qwen3-1.7B: the model
  // card's 1.7B; its checkpoint also stores the tied lm_head (the hub shows 2.03B = + 151936 x 2048).
  const std::pair<const char*, uint64_t> expected[] = {
      {"llama-3.2-1b", 1235814400ull}, {"llama-3.2-3b", 3212749824ull}, {"llama-3.1-8b", 8030261248ull},
      {"qwen2.5-0.5b", 494032768ull},  {"qwen2.5-1.5b", 1543714304ull}, {"qwen3-0.6b", 596049920ull},
      {"qwen3-1.7b", 1720574976ull},   {"qwen3-4b", 4022468096ull},     {"qwen3-8b", 8190735360ull},
  };
  EXPECT_EQ(shape_names().size(), std::size(expected));
  for (auto [name, n] : expected) {
    auto c = shape_config(name);
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_TRUE(validate_config(*c, name).ok()) << name;
    EXPECT_EQ(count_from_shapes(*c), n) << name;
  }
  auto bad = shape_config("llama-9b");
  ASSERT_FALSE(bad.ok());
  EXPECT_HAS(bad.message(), "unknown model shape 'llama-9b'");
  EXPECT_HAS(bad.message(), "qwen3-0.6b");
}

TEST(Shapes, DecodeBytesPerToken) {
  auto c = *shape_config("llama-3.2-1b");
  // Tied: all parameters once (the embedding table is read in full as the LM head) + one embedding row.
  EXPECT_EQ(decode_bytes_per_token(c, DType::BF16), 2 * 1235814400ull + 2 * 2048);
  auto q = *shape_config("qwen3-8b");
  // Untied: the embedding table is read as one row only.
  EXPECT_EQ(decode_bytes_per_token(q, DType::F32), 4 * (8190735360ull - 151936ull * 4096 + 4096));
}

TEST(RandomModel, DeterministicAndScaled) {
  for (Family f : {Family::Llama, Family::Qwen2, Family::Qwen3}) {
    const ModelConfig c = test::tiny_config(f);
    Model a = make_random_model(c, DType::F32, 42);
    Model b = make_random_model(c, DType::F32, 42);
    Model d = make_random_model(c, DType::F32, 43);
    Weights wa = a.weights, wb = b.weights, wd = d.weights;
    auto sa = weight_slots(c, wa), sb = weight_slots(c, wb), sd = weight_slots(c, wd);
    ASSERT_EQ(sa.size(), sb.size());
    size_t n_differ = 0;
    for (size_t i = 0; i < sa.size(); ++i) {
      const TensorView& t = *sa[i].view;
      ASSERT_TRUE(t.present()) << sa[i].name;
      EXPECT_EQ(t.shape, sa[i].shape);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 256, 0u);
      EXPECT_EQ(std::memcmp(t.data, sb[i].view->data, t.nbytes()), 0) << sa[i].name;
      n_differ += std::memcmp(t.data, sd[i].view->data, t.nbytes()) != 0;
      double sum = 0, sq = 0;
      for (int64_t e = 0; e < t.numel(); ++e) {
        const float v = t.at(size_t(e)) - (sa[i].is_norm ? 1.f : 0.f);
        ASSERT_TRUE(std::isfinite(v));
        ASSERT_LT(std::fabs(v), 0.2f) << sa[i].name;  // 10 sigma
        sum += v;
        sq += double(v) * v;
      }
      if (t.numel() >= 400) {
        const double mean = sum / double(t.numel()), sd2 = std::sqrt(sq / double(t.numel()) - mean * mean);
        EXPECT_NEAR(mean, 0.0, 0.005) << sa[i].name;
        EXPECT_NEAR(sd2, 0.02, 0.004) << sa[i].name;
      }
    }
    EXPECT_EQ(n_differ, sa.size());
    EXPECT_EQ(a.weights.lm_head.data == a.weights.tok_embd.data, c.tie_word_embeddings);
    EXPECT_EQ(parameter_count(a.weights), count_from_shapes(c));
  }
}

TEST(RandomModel, LowPrecisionDtypes) {
  const ModelConfig c = test::tiny_config(Family::Qwen2);
  Model f32 = make_random_model(c, DType::F32, 5);
  for (DType dt : {DType::BF16, DType::F16}) {
    Model m = make_random_model(c, dt, 5);
    EXPECT_EQ(m.weights.layers[1].bq.dtype, dt);
    // Same random stream, rounded: within the format's relative precision.
    const TensorView& a = f32.weights.layers[1].w_down;
    const TensorView& b = m.weights.layers[1].w_down;
    for (int64_t e = 0; e < a.numel(); ++e)
      ASSERT_NEAR(b.at(size_t(e)), a.at(size_t(e)), std::fabs(a.at(size_t(e))) * (dt == DType::BF16 ? 4e-3 : 1e-3) + 1e-7);
  }
}

}  // namespace
}  // namespace mk
