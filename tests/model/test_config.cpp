// config.json / generation_config.json parsing: each family from its published config text, both RoPE
// spellings, generation overrides, and every bad-input case (each asserting on the message content).
#include <nlohmann/json.hpp>
#include <random>

#include "model/config.h"
#include "model/family.h"
#include "model_test_util.h"

namespace mk {
namespace {

using json = nlohmann::json;
using test::TempDir;

const char* LLAMA_3_2_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* QWEN2_5_0_5B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

const char* QWEN3_0_6B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Writes config.json (+ generation_config.json when given) and loads the config.
Expected<ModelConfig> load(const TempDir& dir, const std::string& config, const std::string& gen = "") {
  test::write_text(dir / "config.json", config);
  if (!gen.empty()) test::write_text(dir / "generation_config.json", gen);
  return load_config(dir.path());
}

// config.json text: `base` with fields replaced (null value: field removed).
std::string edit(const char* base, const json& changes) {
  json j = json::parse(base);
  for (const auto& [k, v] : changes.items()) {
    if (v.is_null()) j.erase(k);
    else j[k] = v;
  }
  return j.dump();
}

std::string load_error(const std::string& config, const std::string& gen = "") {
  TempDir dir;
  auto c = load(dir, config, gen);
  EXPECT_FALSE(c.ok()) << config;
  if (c.ok()) return "";
  EXPECT_HAS(c.message(), (dir / (gen.empty() ? "config.json" : "")).string());
  return c.message();
}

TEST(Config, Llama32) {
  TempDir dir;
  auto c = load(dir, LLAMA_3_2_1B);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->family, Family::Llama);
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->n_vocab, 128256);
  EXPECT_EQ(c->n_embd, 2048);
  EXPECT_EQ(c->n_ff, 8192);
  EXPECT_EQ(c->n_layer, 16);
  EXPECT_EQ(c->n_head, 32);
  EXPECT_EQ(c->n_kv_head, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_FLOAT_EQ(c->rope.theta, 500000.f);
  EXPECT_FLOAT_EQ(c->rope.factor, 32.f);
  EXPECT_FLOAT_EQ(c->rope.low_freq_factor, 1.f);
  EXPECT_FLOAT_EQ(c->rope.high_freq_factor, 4.f);
  EXPECT_EQ(c->rope.original_max_position, 8192);
  EXPECT_EQ(c->max_position, 131072);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001}));
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST(Config, Qwen25) {
  TempDir dir;
  auto c = load(dir, QWEN2_5_0_5B);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->family, Family::Qwen2);
  EXPECT_EQ(c->head_dim, 64);  // 896 / 14: no head_dim field
  EXPECT_EQ(c->n_kv_head, 2);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_FLOAT_EQ(c->rope.theta, 1e6f);
  EXPECT_EQ(family_name(c->family), "qwen2");
}

TEST(Config, Qwen3) {
  TempDir dir;
  auto c = load(dir, QWEN3_0_6B);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->family, Family::Qwen3);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->q_dim(), 2048);  // != hidden_size: head_dim is explicit
  EXPECT_EQ(c->kv_dim(), 1024);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->max_position, 40960);
  // Without head_dim Qwen3 takes transformers' default, 128, not hidden/heads.
  auto d = load(dir, edit(QWEN3_0_6B, {{"head_dim", nullptr}}));
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->head_dim, 128);
}

TEST(Config, MatchesNamedShapes) {
  TempDir dir;
  for (auto [text, name] : {std::pair{LLAMA_3_2_1B, "llama-3.2-1b"}, std::pair{QWEN2_5_0_5B, "qwen2.5-0.5b"},
                            std::pair{QWEN3_0_6B, "qwen3-0.6b"}}) {
    auto c = load(dir, text);
    auto s = shape_config(name);
    ASSERT_TRUE(c.ok() && s.ok()) << name;
    EXPECT_EQ(c->n_vocab, s->n_vocab) << name;
    EXPECT_EQ(c->n_embd, s->n_embd) << name;
    EXPECT_EQ(c->n_ff, s->n_ff) << name;
    EXPECT_EQ(c->n_layer, s->n_layer) << name;
    EXPECT_EQ(c->n_head, s->n_head) << name;
    EXPECT_EQ(c->n_kv_head, s->n_kv_head) << name;
    EXPECT_EQ(c->head_dim, s->head_dim) << name;
    EXPECT_EQ(c->rope.type, s->rope.type) << name;
    EXPECT_EQ(c->rope.theta, s->rope.theta) << name;
    EXPECT_EQ(c->tie_word_embeddings, s->tie_word_embeddings) << name;
    EXPECT_EQ(c->qkv_bias, s->qkv_bias) << name;
    EXPECT_EQ(c->qk_norm, s->qk_norm) << name;
  }
}

TEST(Config, RopeParametersSpelling) {
  TempDir dir;
  // transformers 5: rope_parameters holds theta and scaling; no rope_theta/rope_scaling.
  auto c = load(dir, edit(LLAMA_3_2_1B, {{"rope_theta", nullptr},
                                         {"rope_scaling", nullptr},
                                         {"torch_dtype", nullptr},
                                         {"dtype", "float32"},
                                         {"rope_parameters", {{"rope_type", "llama3"},
                                                              {"rope_theta", 123456.0},
                                                              {"factor", 8.0},
                                                              {"low_freq_factor", 2.0},
                                                              {"high_freq_factor", 5.0},
                                                              {"original_max_position_embeddings", 4096}}}}));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_FLOAT_EQ(c->rope.theta, 123456.f);
  EXPECT_FLOAT_EQ(c->rope.factor, 8.f);
  EXPECT_FLOAT_EQ(c->rope.low_freq_factor, 2.f);
  EXPECT_FLOAT_EQ(c->rope.high_freq_factor, 5.f);
  EXPECT_EQ(c->rope.original_max_position, 4096);
  EXPECT_EQ(c->torch_dtype, "float32");
  auto d = load(dir, edit(QWEN3_0_6B, {{"rope_theta", nullptr}, {"rope_scaling", nullptr},
                                       {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}}}}));
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->rope.type, "default");
  EXPECT_FLOAT_EQ(d->rope.theta, 5e5f);
  // Old spelling "type" instead of "rope_type".
  auto e = load(dir, edit(LLAMA_3_2_1B, {{"rope_scaling", {{"type", "llama3"}, {"factor", 4.0},
                                                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                                           {"original_max_position_embeddings", 8192}}}}));
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_FLOAT_EQ(e->rope.factor, 4.f);
  // No rope fields at all: theta 10000, default rotation.
  auto f = load(dir, edit(QWEN2_5_0_5B, {{"rope_theta", nullptr}}));
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_FLOAT_EQ(f->rope.theta, 10000.f);
}

TEST(Config, GenerationConfigOverrides) {
  TempDir dir;
  auto c = load(dir, LLAMA_3_2_1B, R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
                                      "do_sample": true, "temperature": 0.6})");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  auto d = load(dir, QWEN3_0_6B, R"({"bos_token_id": 7, "eos_token_id": 151643})");
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->bos_token_id, 7);
  EXPECT_EQ(d->eos_token_ids, (std::vector<int32_t>{151643}));
  // Keys absent or null in generation_config.json keep config.json's.
  auto e = load(dir, QWEN3_0_6B, R"({"eos_token_id": null})");
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->eos_token_ids, (std::vector<int32_t>{151645}));
  EXPECT_EQ(e->bos_token_id, 151643);
}

TEST(ConfigErrors, MissingAndMalformedFiles) {
  TempDir dir;
  auto c = load_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_HAS(c.message(), (dir / "config.json").string());
  EXPECT_HAS(c.message(), "missing");
  auto d = load_config(dir / "nope");
  ASSERT_FALSE(d.ok());
  EXPECT_HAS(d.message(), "does not exist");
  EXPECT_HAS(load_error("{\"architectures\": [\"LlamaForCausalLM\"], "), "not valid JSON");
  EXPECT_HAS(load_error("[1]"), "expected a JSON object");
  TempDir g;
  auto e = load(g, LLAMA_3_2_1B, "{oops");
  ASSERT_FALSE(e.ok());
  EXPECT_HAS(e.message(), (g / "generation_config.json").string());
  EXPECT_HAS(e.message(), "not valid JSON");
}

TEST(ConfigErrors, UnknownArchitecture) {
  auto m = load_error(edit(LLAMA_3_2_1B, {{"architectures", {"MistralForCausalLM"}}}));
  EXPECT_HAS(m, "field 'architectures'");
  EXPECT_HAS(m, "\"MistralForCausalLM\"");
  EXPECT_HAS(m, "supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"architectures", nullptr}})), "field 'architectures'");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"architectures", json::array()}})), "got []");
}

TEST(ConfigErrors, UnsupportedRopeType) {
  auto m = load_error(edit(LLAMA_3_2_1B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}));
  EXPECT_HAS(m, "field 'rope_scaling.rope_type'");
  EXPECT_HAS(m, "\"yarn\"");
  EXPECT_HAS(m, "supported rope types: default, llama3");
  auto n = load_error(edit(QWEN3_0_6B, {{"rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e4}}}}));
  EXPECT_HAS(n, "field 'rope_parameters.rope_type'");
  EXPECT_HAS(n, "\"dynamic\"");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}})),
             "field 'rope_scaling.type' is \"linear\"");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"rope_scaling", {{"factor", 2.0}}}})),
             "field 'rope_scaling.rope_type' is missing");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"rope_scaling", "llama3"}})),
             "field 'rope_scaling' must be an object");
  auto f = load_error(edit(LLAMA_3_2_1B, {{"rope_scaling", {{"rope_type", "llama3"}, {"low_freq_factor", 1.0},
                                                            {"high_freq_factor", 4.0},
                                                            {"original_max_position_embeddings", 8192}}}}));
  EXPECT_HAS(f, "field 'rope_scaling.factor' is missing");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"rope_theta", -1}})), "field 'rope_theta' must be a positive number");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"partial_rotary_factor", 0.5}})), "partial_rotary_factor");
}

TEST(ConfigErrors, MissingOrInvalidFields) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
    auto m = load_error(edit(QWEN3_0_6B, {{field, nullptr}}));
    EXPECT_HAS(m, cat("field '", field, "' is missing (expected a positive integer)"));
    auto n = load_error(edit(QWEN3_0_6B, {{field, 0}}));
    EXPECT_HAS(n, cat("field '", field, "' must be a positive integer, got 0"));
  }
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"num_hidden_layers", "16"}})),
             "field 'num_hidden_layers' must be a positive integer, got \"16\"");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"hidden_size", 2048.5}})), "got 2048.5");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"num_key_value_heads", 5}})),
             "'num_attention_heads' (32) must be a multiple of 'num_key_value_heads' (5)");
  EXPECT_HAS(load_error(edit(QWEN2_5_0_5B, {{"num_attention_heads", 13}, {"num_key_value_heads", 13}})),
             "'hidden_size' (896) must be a multiple of 'num_attention_heads' (13)");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"head_dim", 63}})), "'head_dim' (63) must be even");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"rms_norm_eps", "small"}})), "field 'rms_norm_eps'");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"tie_word_embeddings", 1}})),
             "field 'tie_word_embeddings' must be true or false");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"eos_token_id", {1, "x"}}})),
             "field 'eos_token_id' must be a token id or a list of token ids");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"eos_token_id", 200000}})),
             "'eos_token_id' holds 200000, outside the vocabulary (vocab_size 128256)");
}

TEST(ConfigErrors, FamilyQuirks) {
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"hidden_act", "gelu"}})), "field 'hidden_act' must be \"silu\"");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"attention_bias", true}})),
             "field 'attention_bias' is true, which is not supported");
  EXPECT_HAS(load_error(edit(LLAMA_3_2_1B, {{"mlp_bias", true}})), "field 'mlp_bias'");
  EXPECT_HAS(load_error(edit(QWEN2_5_0_5B, {{"use_sliding_window", true}})), "field 'use_sliding_window'");
  EXPECT_HAS(load_error(edit(QWEN3_0_6B, {{"attention_bias", true}})), "field 'attention_bias'");
}

TEST(ConfigErrors, GenerationConfigBadValues) {
  TempDir dir;
  auto c = load(dir, LLAMA_3_2_1B, R"({"eos_token_id": "end"})");
  ASSERT_FALSE(c.ok());
  EXPECT_HAS(c.message(), (dir / "generation_config.json").string());
  EXPECT_HAS(c.message(), "field 'eos_token_id'");
  auto d = load(dir, LLAMA_3_2_1B, R"({"bos_token_id": 999999})");
  ASSERT_FALSE(d.ok());
  EXPECT_HAS(d.message(), "'bos_token_id' (999999) is outside the vocabulary");
}

TEST(ConfigErrors, FuzzNeverThrows) {
  // Random edits of a real config: every outcome is a config or an error naming the file; no
  // exception escapes (a type mismatch inside nlohmann::json would throw).
  std::mt19937_64 rng(99);
  const std::string base = LLAMA_3_2_1B;
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnul";
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = base;
    for (int k = 0; k < 1 + int(rng() % 3); ++k) {
      const size_t pos = rng() % text.size();
      if (rng() % 2) text[pos] = alphabet[rng() % alphabet.size()];
      else text.erase(pos, 1 + rng() % 6);
      if (text.empty()) text = "{";
    }
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) continue;
    try {
      auto c = parse_model_config(j, "fuzz/config.json");
      if (c.ok()) ++ok;
      else ASSERT_EQ(c.message().rfind("fuzz/config.json: ", 0), 0u) << c.message();
    } catch (const std::exception& e) {
      FAIL() << "exception " << e.what() << " on\n" << text;
    }
  }
  EXPECT_GT(ok, 0);
  // Structured: random fields (also inside rope_scaling) replaced by values of every JSON type.
  const json values[] = {nullptr, "x", -1, 0, 3, 1.5, 1e30, 18446744073709551615ull, true,
                         json::array(), json::array({1, "a"}), json::object(), {{"rope_type", "llama3"}}};
  const json orig = json::parse(base);
  std::vector<std::string> keys;
  for (const auto& [k, v] : orig.items()) keys.push_back(k);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    json j = orig;
    for (int k = 0; k < 1 + int(rng() % 2); ++k) {
      const json& v = values[rng() % std::size(values)];
      if (!j["rope_scaling"].is_object()) j["rope_scaling"] = json::object();
      if (rng() % 4 == 0) j["rope_scaling"][std::vector<std::string>{"rope_type", "factor", "low_freq_factor",
                                                                      "original_max_position_embeddings"}[rng() % 4]] = v;
      else j[keys[rng() % keys.size()]] = v;
    }
    try {
      auto c = parse_model_config(j, "fuzz/config.json");
      if (!c.ok()) {
        ++errors;
        ASSERT_EQ(c.message().rfind("fuzz/config.json: ", 0), 0u) << c.message();
      }
    } catch (const std::exception& e) {
      FAIL() << "exception " << e.what() << " on\n" << j.dump();
    }
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace mk
