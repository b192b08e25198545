// The golden model folders (tests/golden/*, written by Hugging Face transformers through
// tools/make_golden.py) load, and what load_model reads agrees with their config.json read directly
// and with the tensors their safetensors headers list.
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/safetensors.h"
#include "model_test_util.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TEST(GoldenFolders, LoadAndAgreeWithConfigJson) {
  const fs::path root = fs::path(MK_SOURCE_DIR) / "tests" / "golden";
  if (!fs::exists(root)) GTEST_SKIP() << "no golden folders";
  int n = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!fs::exists(e.path() / "config.json")) continue;
    ++n;
    SCOPED_TRACE(e.path().string());
    LoadOptions o;
    o.progress = LoadOptions::Progress::Never;
    auto m = load_model(e.path(), o);
    ASSERT_TRUE(m.ok()) << m.message();
    const json j = json::parse(test::read_text(e.path() / "config.json"));
    const ModelConfig& c = m->config;
    EXPECT_EQ(c.architecture, j["architectures"][0].get<std::string>());
    EXPECT_EQ(c.n_layer, j["num_hidden_layers"].get<int>());
    EXPECT_EQ(c.n_embd, j["hidden_size"].get<int>());
    EXPECT_EQ(c.n_ff, j["intermediate_size"].get<int>());
    EXPECT_EQ(c.n_head, j["num_attention_heads"].get<int>());
    EXPECT_EQ(c.n_kv_head, j.value("num_key_value_heads", c.n_head));
    EXPECT_EQ(c.n_vocab, j["vocab_size"].get<int>());
    EXPECT_EQ(c.tie_word_embeddings, j.value("tie_word_embeddings", false));
    const json rope = j.contains("rope_parameters") ? j["rope_parameters"] : j.value("rope_scaling", json());
    const double theta = j.contains("rope_parameters") ? rope["rope_theta"].get<double>() : j["rope_theta"].get<double>();
    EXPECT_FLOAT_EQ(c.rope.theta, float(theta));
    if (rope.is_object() && rope.value("rope_type", "default") == "llama3") {
      EXPECT_EQ(c.rope.type, "llama3");
      EXPECT_FLOAT_EQ(c.rope.factor, rope["factor"].get<float>());
      EXPECT_EQ(c.rope.original_max_position, rope["original_max_position_embeddings"].get<int>());
    } else {
      EXPECT_EQ(c.rope.type, "default");
    }
    // Every weight tensor in the file is bound: the parameter count equals the file's element count
    // (minus a stored-but-tied lm_head, which transformers does not save).
    auto st = open_safetensors(e.path() / "model.safetensors");
    ASSERT_TRUE(st.ok()) << st.message();
    uint64_t numel = 0;
    for (const auto& [name, t] : st->header.tensors) {
      uint64_t k = 1;
      for (auto d : t.shape) k *= uint64_t(d);
      numel += k;
    }
    EXPECT_EQ(parameter_count(m->weights), numel);
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace mk
