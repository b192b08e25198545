// safetensors writer and model-folder writer (see safetensors_writer.h).
#include "model/safetensors_writer.h"

#include <fstream>

#include "model/safetensors.h"
#include "model/weight_slots.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Status write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return make_error(path.string(), ": cannot create");
  out << text;
  if (!out) return make_error(path.string(), ": write failed");
  return {};
}

}  // namespace

std::string safetensors_header_bytes(const std::vector<TensorToWrite>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  std::string text = h.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

Status write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  for (const auto& t : tensors) {
    uint64_t n = safetensors_dtype_size(t.dtype);
    if (n == 0) return make_error("write_safetensors: tensor '", t.name, "': unknown dtype ", t.dtype);
    for (auto d : t.shape) n *= uint64_t(d);
    if (n != t.nbytes)
      return make_error("write_safetensors: tensor '", t.name, "': ", t.nbytes,
                        " bytes given, shape x dtype needs ", n);
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) return make_error(path.string(), ": cannot create");
  out << safetensors_header_bytes(tensors, metadata);
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), std::streamsize(t.nbytes));
  if (!out) return make_error(path.string(), ": write failed");
  return {};
}

json model_config_json(const ModelConfig& c, bool rope_parameters) {
  json j = {
      {"architectures", {c.architecture}},
      {"vocab_size", c.n_vocab},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.n_ff},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_kv_head},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", c.rms_norm_eps},
      {"max_position_embeddings", c.max_position},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", c.torch_dtype.empty() ? "bfloat16" : c.torch_dtype},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  json scaling = {{"rope_type", c.rope.type}};
  if (c.rope.type == "llama3") {
    scaling["factor"] = c.rope.factor;
    scaling["low_freq_factor"] = c.rope.low_freq_factor;
    scaling["high_freq_factor"] = c.rope.high_freq_factor;
    scaling["original_max_position_embeddings"] = c.rope.original_max_position;
  }
  if (rope_parameters) {
    scaling["rope_theta"] = c.rope.theta;
    j["rope_parameters"] = scaling;
  } else {
    j["rope_theta"] = c.rope.theta;
    j["rope_scaling"] = c.rope.type == "default" ? json(nullptr) : scaling;
  }
  return j;
}

Status write_model_folder(const fs::path& dir, const Model& m, int n_shards, bool rope_parameters) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(dir.string(), ": cannot create: ", ec.message());
  MK_TRY(write_file(dir / "config.json", model_config_json(m.config, rope_parameters).dump(2)));
  // A copy of the views (same data pointers) that weight_slots can point into.
  Weights views = m.weights;
  std::vector<TensorToWrite> all;
  for (const auto& s : weight_slots(m.config, views)) {
    const TensorView& t = *s.view;
    if (!t.present()) return make_error("write_model_folder: tensor '", s.name, "' has no data");
    all.push_back({s.name, std::string(dtype_name(t.dtype)), t.shape, t.data, t.nbytes()});
  }
  if (n_shards <= 1) return write_safetensors(dir / "model.safetensors", all);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  uint64_t total = 0;
  const size_t per = (all.size() + size_t(n_shards) - 1) / size_t(n_shards);
  for (int s = 0; s < n_shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    std::vector<TensorToWrite> part;
    for (size_t i = size_t(s) * per; i < std::min(all.size(), size_t(s + 1) * per); ++i) {
      part.push_back(all[i]);
      index["weight_map"][all[i].name] = name;
      total += all[i].nbytes;
    }
    MK_TRY(write_safetensors(dir / name, part));
  }
  index["metadata"]["total_size"] = total;
  return write_file(dir / "model.safetensors.index.json", index.dump(2));
}

}  // namespace mk
