// load_model end to end on model folders written on the fly: each family, single file and sharded,
// mixed dtypes, tied and untied heads, progress reporting; and every bad-checkpoint case (missing
// tensor, wrong shape, unsupported dtype, missing or bad shards), each asserting on the message.
#include <cstring>
#include <random>

#include "core/progress.h"
#include "model/weight_slots.h"
#include "model_test_util.h"

namespace mk {
namespace {

using test::TempDir;

// Every tensor of `a` and `b` has the same name, dtype, shape and bytes.
void expect_same_weights(const ModelConfig& c, const Weights& a, const Weights& b) {
  Weights wa = a, wb = b;
  auto sa = weight_slots(c, wa), sb = weight_slots(c, wb);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    const TensorView &x = *sa[i].view, &y = *sb[i].view;
    EXPECT_EQ(y.name, sa[i].name);
    EXPECT_EQ(x.dtype, y.dtype) << sa[i].name;
    EXPECT_EQ(x.shape, y.shape) << sa[i].name;
    ASSERT_EQ(x.nbytes(), y.nbytes());
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes()), 0) << sa[i].name;
  }
}

LoadOptions quiet() {
  LoadOptions o;
  o.progress = LoadOptions::Progress::Never;
  return o;
}

TEST(Load, EachFamilySingleAndSharded) {
  for (Family f : {Family::Llama, Family::Qwen2, Family::Qwen3}) {
    for (int shards : {1, 3}) {
      for (bool rope_parameters : {false, true}) {
        TempDir dir;
        ModelConfig c = test::tiny_config(f);
        Model ref = make_random_model(c, DType::BF16, 11 + shards);
        ASSERT_TRUE(write_model_folder(dir.path(), ref, shards, rope_parameters).ok());
        EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors.index.json"), shards > 1);
        auto m = load_model(dir.path(), quiet());
        ASSERT_TRUE(m.ok()) << m.message();
        EXPECT_EQ(m->config.family, f);
        EXPECT_EQ(m->config.head_dim, c.head_dim);
        EXPECT_EQ(m->config.rope.type, c.rope.type);
        EXPECT_EQ(m->config.rope.theta, c.rope.theta);
        EXPECT_EQ(m->config.rope.factor, c.rope.factor);
        EXPECT_EQ(m->config.qkv_bias, c.qkv_bias);
        EXPECT_EQ(m->config.qk_norm, c.qk_norm);
        expect_same_weights(c, ref.weights, m->weights);
        EXPECT_EQ(m->weights.lm_head.data == m->weights.tok_embd.data, c.tie_word_embeddings);
        EXPECT_EQ(m->weights.storage.size(), size_t(shards));
      }
    }
  }
}

TEST(Load, MixedDtypesAndUntiedHead) {
  TempDir dir;
  ModelConfig c = test::tiny_config(Family::Llama);
  c.tie_word_embeddings = false;
  Model a = make_random_model(c, DType::BF16, 1), b = make_random_model(c, DType::F32, 2),
        d = make_random_model(c, DType::F16, 3);
  // Layer 0 in BF16, layer 1 in F32, the rest in F16.
  Model mixed = d;
  mixed.weights.layers[0] = a.weights.layers[0];
  mixed.weights.layers[1] = b.weights.layers[1];
  ASSERT_TRUE(write_model_folder(dir.path(), mixed, 2).ok());
  auto m = load_model(dir.path(), quiet());
  ASSERT_TRUE(m.ok()) << m.message();
  expect_same_weights(c, mixed.weights, m->weights);
  EXPECT_EQ(m->weights.layers[0].wq.dtype, DType::BF16);
  EXPECT_EQ(m->weights.layers[1].w_down.dtype, DType::F32);
  EXPECT_EQ(m->weights.lm_head.dtype, DType::F16);
  EXPECT_NE(m->weights.lm_head.data, m->weights.tok_embd.data);
  EXPECT_EQ(m->weights.lm_head.name, "lm_head.weight");
}

TEST(Load, MisalignedTensorsAreReadable) {
  // An odd-length BF16 tensor first shifts every F32 tensor after it to a 2-byte boundary.
  TempDir dir;
  ModelConfig c = test::tiny_config(Family::Qwen2);
  Model ref = make_random_model(c, DType::F32, 21);
  ASSERT_TRUE(write_model_folder(dir.path(), ref).ok());
  Weights w = ref.weights;
  const uint16_t odd[3] = {1, 2, 3};
  std::vector<TensorToWrite> t = {{"aaa.unused", "BF16", {3}, odd, 6}};
  for (const auto& s : weight_slots(c, w)) t.push_back({s.name, "F32", s.shape, s.view->data, s.view->nbytes()});
  ASSERT_TRUE(write_safetensors(dir / "model.safetensors", t).ok());
  auto st = open_safetensors(dir / "model.safetensors");
  ASSERT_TRUE(st.ok());
  ASSERT_NE(reinterpret_cast<uintptr_t>(st->header.tensors.at("model.norm.weight").data) % 4, 0u);
  auto m = load_model(dir.path(), quiet());
  ASSERT_TRUE(m.ok()) << m.message();
  expect_same_weights(c, ref.weights, m->weights);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->weights.final_norm.data) % 4, 0u);
}

TEST(Load, ProgressCallback) {
  TempDir dir;
  ModelConfig c = test::tiny_config(Family::Qwen3);
  Model ref = make_random_model(c, DType::F32, 9);
  ASSERT_TRUE(write_model_folder(dir.path(), ref, 2).ok());
  LoadOptions o = quiet();
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  o.on_progress = [&](uint64_t done, uint64_t total) { calls.push_back({done, total}); };
  auto m = load_model(dir.path(), o);
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_FALSE(calls.empty());
  uint64_t weight_bytes = 0;
  Weights w = ref.weights;
  for (const auto& s : weight_slots(c, w)) weight_bytes += s.view->nbytes();
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_LE(calls[i - 1].first, calls[i].first);
  EXPECT_EQ(calls.back().first, weight_bytes);
  EXPECT_EQ(calls.back().second, weight_bytes);
  o.prefault = false;
  calls.clear();
  ASSERT_TRUE(load_model(dir.path(), o).ok());
  EXPECT_TRUE(calls.empty());
}

TEST(Load, ProgressBarRendering) {
  EXPECT_EQ(ProgressBar::render("loading weights", 0, 2'000'000'000, 0.0, 10),
            "loading weights [          ] 0 B / 2.00 GB   0%");
  EXPECT_EQ(ProgressBar::render("w", 1'500'000'000, 2'000'000'000, 1.0, 4),
            "w [### ] 1.50 GB / 2.00 GB  75% 1.50 GB/s");
  EXPECT_EQ(ProgressBar::render("w", 5, 0, 0.0, 2), "w [##] 0 B / 0 B 100%");
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar("x", 100, f);
    bar.update(50);
    bar.finish();
  }
  std::rewind(f);
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string out(buf, n);
  EXPECT_HAS(out, " 50%");
  EXPECT_HAS(out, "100%");
  EXPECT_EQ(out.back(), '\n');
}

// A model folder with one tensor replaced (or removed: dtype empty).
std::string load_error_with(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                            bool tied = true) {
  TempDir dir;
  ModelConfig c = test::tiny_config(Family::Qwen3);
  c.tie_word_embeddings = tied;
  Model ref = make_random_model(c, DType::BF16, 4);
  EXPECT_TRUE(write_model_folder(dir.path(), ref).ok());
  Weights w = ref.weights;
  std::vector<TensorToWrite> t;
  std::vector<uint8_t> junk(1 << 16, 0x3c);  // more than any replaced tensor needs
  for (const auto& s : weight_slots(c, w)) {
    if (s.name != name) {
      t.push_back({s.name, "BF16", s.shape, s.view->data, s.view->nbytes()});
    } else if (!dtype.empty()) {
      size_t n = safetensors_dtype_size(dtype);
      for (auto d : shape) n *= size_t(d);
      t.push_back({s.name, dtype, shape, junk.data(), n});
    }
  }
  EXPECT_TRUE(write_safetensors(dir / "model.safetensors", t).ok());
  auto m = load_model(dir.path(), quiet());
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.message();
}

TEST(LoadErrors, MissingTensor) {
  auto m = load_error_with("model.layers.1.mlp.up_proj.weight", "", {});
  EXPECT_HAS(m, "tensor 'model.layers.1.mlp.up_proj.weight' is missing from the checkpoint");
  EXPECT_HAS(m, "expected shape [19, 24]");
  EXPECT_HAS(load_error_with("model.layers.0.self_attn.k_norm.weight", "", {}), "k_norm");
  auto h = load_error_with("lm_head.weight", "", {}, false);
  EXPECT_HAS(h, "'lm_head.weight' is missing");
  EXPECT_HAS(h, "tie_word_embeddings false");
}

TEST(LoadErrors, WrongShape) {
  auto m = load_error_with("model.layers.0.mlp.down_proj.weight", "BF16", {19, 24});
  EXPECT_HAS(m, "model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape [19, 24], expected [24, 19]");
  EXPECT_HAS(load_error_with("model.norm.weight", "F32", {24, 1}), "has shape [24, 1], expected [24]");
  EXPECT_HAS(load_error_with("model.layers.1.self_attn.q_norm.weight", "F32", {4}), "has shape [4], expected [6]");
}

TEST(LoadErrors, UnsupportedDtype) {
  auto m = load_error_with("model.layers.1.self_attn.v_proj.weight", "I64", {18, 24});
  EXPECT_HAS(m, "model.safetensors: tensor 'model.layers.1.self_attn.v_proj.weight' has dtype I64");
  EXPECT_HAS(m, "supported: BF16, F16, F32");
  EXPECT_HAS(load_error_with("model.embed_tokens.weight", "F64", {37, 24}), "has dtype F64");
}

TEST(LoadErrors, FilesAndShards) {
  TempDir dir;
  auto none = load_model(dir.path(), quiet());
  ASSERT_FALSE(none.ok());
  EXPECT_HAS(none.message(), "config.json");
  ModelConfig c = test::tiny_config(Family::Qwen2);
  Model ref = make_random_model(c, DType::BF16, 4);
  ASSERT_TRUE(write_model_folder(dir.path(), ref, 3).ok());
  const auto index = test::read_text(dir / "model.safetensors.index.json");
  const auto shard2 = dir / "model-00002-of-00003.safetensors";
  // A shard named by the index is missing.
  std::filesystem::rename(shard2, dir / "moved");
  auto m = load_model(dir.path(), quiet());
  ASSERT_FALSE(m.ok());
  EXPECT_HAS(m.message(), "model.safetensors.index.json: shard 'model-00002-of-00003.safetensors'");
  EXPECT_HAS(m.message(), "does not exist");
  // The shard exists but lacks a tensor the index puts there (here: shard 3's content).
  std::filesystem::copy_file(dir / "model-00003-of-00003.safetensors", shard2);
  m = load_model(dir.path(), quiet());
  ASSERT_FALSE(m.ok());
  EXPECT_HAS(m.message(), "in 'model-00002-of-00003.safetensors' but that file does not contain it");
  std::filesystem::remove(shard2);
  std::filesystem::rename(dir / "moved", shard2);
  ASSERT_TRUE(load_model(dir.path(), quiet()).ok());
  // Malformed index files.
  test::write_text(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_HAS(load_model(dir.path(), quiet()).message(), "index.json: not valid JSON");
  test::write_text(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
  EXPECT_HAS(load_model(dir.path(), quiet()).message(), "field 'weight_map' missing");
  test::write_text(dir / "model.safetensors.index.json",
                   "{\"weight_map\": {\"model.norm.weight\": \"../model-00001-of-00003.safetensors\"}}");
  EXPECT_HAS(load_model(dir.path(), quiet()).message(), "expected a file name inside");
  test::write_text(dir / "model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": 3}}");
  EXPECT_HAS(load_model(dir.path(), quiet()).message(), "must be a file name");
  // Without index and single file: no weights at all.
  std::filesystem::remove(dir / "model.safetensors.index.json");
  auto w = load_model(dir.path(), quiet());
  ASSERT_FALSE(w.ok());
  EXPECT_HAS(w.message(), "no weights found (expected model.safetensors or model.safetensors.index.json)");
  (void)index;
}

TEST(LoadErrors, CorruptWeightsFile) {
  TempDir dir;
  Model ref = make_random_model(test::tiny_config(Family::Llama), DType::F16, 4);
  ASSERT_TRUE(write_model_folder(dir.path(), ref).ok());
  const auto full = test::read_text(dir / "model.safetensors");
  test::write_text(dir / "model.safetensors", full.substr(0, full.size() - 100));
  auto m = load_model(dir.path(), quiet());
  ASSERT_FALSE(m.ok());
  EXPECT_HAS(m.message(), (dir / "model.safetensors").string());
  EXPECT_HAS(m.message(), "truncated");
}

}  // namespace
}  // namespace mk
