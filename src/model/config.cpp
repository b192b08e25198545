// config.json -> ModelConfig (see config.h).
#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "megakernel/model.h"
#include "model/config_reader.h"
#include "model/family.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// rope_scaling / rope_parameters object: type and its parameters. `allow_missing_type`: a
// rope_parameters object without rope_type means the default rotation.
Status parse_rope_type(const ConfigReader& r, bool allow_missing_type, RopeConfig& rope) {
  std::string type;
  if (r.has("rope_type")) {
    auto t = r.string("rope_type");
    if (!t) return t.error();
    type = *t;
  } else if (r.has("type")) {
    auto t = r.string("type");
    if (!t) return t.error();
    type = *t;
  } else if (allow_missing_type) {
    type = "default";
  } else {
    return r.error("rope_type", "is missing (expected \"default\" or \"llama3\")");
  }
  const std::string field = r.has("rope_type") ? "rope_type" : "type";
  if (type == "default") {
    rope.type = "default";
    return {};
  }
  if (type != "llama3")
    return r.error(field, cat("is \"", type,
                              "\", which is not supported (supported rope types: default, llama3)"));
  rope.type = "llama3";
  auto factor = r.positive_number("factor");
  if (!factor) return factor.error();
  auto lo = r.positive_number("low_freq_factor");
  if (!lo) return lo.error();
  auto hi = r.positive_number("high_freq_factor");
  if (!hi) return hi.error();
  auto orig = r.positive_int("original_max_position_embeddings");
  if (!orig) return orig.error();
  if (!(*hi > *lo))
    return r.error("high_freq_factor", cat("(", *hi, ") must be greater than low_freq_factor (", *lo, ")"));
  rope.factor = float(*factor);
  rope.low_freq_factor = float(*lo);
  rope.high_freq_factor = float(*hi);
  rope.original_max_position = *orig;
  return {};
}

Status parse_rope(const ConfigReader& r, RopeConfig& rope) {
  auto top_theta = r.positive_number_or("rope_theta", 10000.0);
  if (!top_theta) return top_theta.error();
  rope.theta = float(*top_theta);
  if (r.has("rope_parameters")) {  // transformers 5
    auto p = r.object("rope_parameters");
    if (!p) return p.error();
    auto theta = p->positive_number_or("rope_theta", *top_theta);
    if (!theta) return theta.error();
    rope.theta = float(*theta);
    return parse_rope_type(*p, true, rope);
  }
  if (r.has("rope_scaling")) {
    auto s = r.object("rope_scaling");
    if (!s) return s.error();
    return parse_rope_type(*s, false, rope);
  }
  return {};
}

// eos_token_id: an integer or a list of integers.
Status parse_eos(const ConfigReader& r, std::vector<int32_t>& out) {
  if (!r.has("eos_token_id")) return {};
  const json& v = r.json()["eos_token_id"];
  std::vector<int32_t> ids;
  auto add = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) return false;
    ids.push_back(int32_t(x.get<int64_t>()));
    return true;
  };
  bool ok = v.is_array() ? std::all_of(v.begin(), v.end(), add) : add(v);
  if (!ok) return r.expected("eos_token_id", "a token id or a list of token ids");
  out = std::move(ids);
  return {};
}

Status parse_bos(const ConfigReader& r, int32_t& out) {
  if (!r.has("bos_token_id")) return {};
  const json& v = r.json()["bos_token_id"];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    return r.expected("bos_token_id", "a token id");
  out = int32_t(v.get<int64_t>());
  return {};
}

// architectures[0] -> family.
Expected<const FamilySpec*> parse_family(const ConfigReader& r) {
  std::string known;
  for (const auto* f : all_families()) known += cat(known.empty() ? "" : ", ", f->architecture);
  if (!r.has("architectures") || !r.json()["architectures"].is_array() ||
      r.json()["architectures"].empty() || !r.json()["architectures"][0].is_string())
    return r.expected("architectures", cat("a list like [\"LlamaForCausalLM\"] (supported: ", known, ")"));
  const std::string arch = r.json()["architectures"][0].get<std::string>();
  const FamilySpec* f = find_family(arch);
  if (f == nullptr)
    return r.error("architectures", cat("names \"", arch, "\", which is not supported (supported: ", known, ")"));
  return f;
}

}  // namespace

Expected<json> read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path.string(), ": cannot open (does the file exist?)");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    return make_error(path.string(), ": not valid JSON: ", e.what());
  }
}

Expected<ModelConfig> parse_model_config(const json& j, const std::string& origin) {
  if (!j.is_object()) return make_error(origin, ": expected a JSON object, got ", j.type_name());
  ConfigReader r(j, origin);
  auto family = parse_family(r);
  if (!family) return family.error();
  ModelConfig c;
  c.architecture = (*family)->architecture;
  c.family = (*family)->family;
  auto get = [&](int& dst, std::string_view key) -> Status {
    auto v = r.positive_int(key);
    if (!v) return v.error();
    dst = *v;
    return {};
  };
  MK_TRY(get(c.n_vocab, "vocab_size"));
  MK_TRY(get(c.n_embd, "hidden_size"));
  MK_TRY(get(c.n_ff, "intermediate_size"));
  MK_TRY(get(c.n_layer, "num_hidden_layers"));
  MK_TRY(get(c.n_head, "num_attention_heads"));
  auto kv = r.positive_int_or("num_key_value_heads", c.n_head);
  if (!kv) return kv.error();
  c.n_kv_head = *kv;
  auto hd = r.positive_int_or("head_dim", 0);
  if (!hd) return hd.error();
  c.head_dim = *hd;
  auto eps = r.positive_number_or("rms_norm_eps", 1e-6);
  if (!eps) return eps.error();
  c.rms_norm_eps = float(*eps);
  auto maxpos = r.positive_int_or("max_position_embeddings", (*family)->default_max_position);
  if (!maxpos) return maxpos.error();
  c.max_position = *maxpos;
  auto tie = r.bool_or("tie_word_embeddings", false);
  if (!tie) return tie.error();
  c.tie_word_embeddings = *tie;
  auto dt = r.string_or(r.has("dtype") ? "dtype" : "torch_dtype", "");
  if (!dt) return dt.error();
  c.torch_dtype = *dt;
  if (r.has("partial_rotary_factor")) {
    auto prf = r.positive_number("partial_rotary_factor");
    if (!prf) return prf.error();
    if (*prf != 1.0) return r.expected("partial_rotary_factor", "1.0 (partial rotary embeddings are not supported)");
  }
  MK_TRY(parse_rope(r, c.rope));
  MK_TRY(parse_eos(r, c.eos_token_ids));
  MK_TRY(parse_bos(r, c.bos_token_id));
  MK_TRY((*family)->apply(r, c));
  if (c.head_dim == 0) {
    if (c.n_embd % c.n_head != 0)
      return make_error(origin, ": field 'hidden_size' (", c.n_embd,
                        ") must be a multiple of 'num_attention_heads' (", c.n_head,
                        ") when 'head_dim' is not given");
    c.head_dim = c.n_embd / c.n_head;
  }
  MK_TRY(validate_config(c, origin));
  return c;
}

Status apply_generation_config(const json& gen, const std::string& origin, ModelConfig& c) {
  if (!gen.is_object()) return make_error(origin, ": expected a JSON object, got ", gen.type_name());
  ConfigReader r(gen, origin);
  MK_TRY(parse_eos(r, c.eos_token_ids));
  MK_TRY(parse_bos(r, c.bos_token_id));
  return validate_config(c, origin);
}

Status validate_config(const ModelConfig& c, const std::string& origin) {
  if (c.n_vocab <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_layer <= 0 || c.n_head <= 0 ||
      c.n_kv_head <= 0 || c.head_dim <= 0)
    return make_error(origin, ": sizes must be positive (vocab ", c.n_vocab, ", hidden ", c.n_embd,
                      ", intermediate ", c.n_ff, ", layers ", c.n_layer, ", heads ", c.n_head,
                      ", kv heads ", c.n_kv_head, ", head_dim ", c.head_dim, ")");
  if (c.n_head % c.n_kv_head != 0)
    return make_error(origin, ": field 'num_attention_heads' (", c.n_head,
                      ") must be a multiple of 'num_key_value_heads' (", c.n_kv_head, ")");
  if (c.head_dim % 2 != 0)
    return make_error(origin, ": field 'head_dim' (", c.head_dim, ") must be even (RoPE rotates pairs)");
  for (int32_t id : c.eos_token_ids)
    if (id >= c.n_vocab)
      return make_error(origin, ": field 'eos_token_id' holds ", id,
                        ", outside the vocabulary (vocab_size ", c.n_vocab, ")");
  if (c.bos_token_id >= c.n_vocab)
    return make_error(origin, ": field 'bos_token_id' (", c.bos_token_id,
                      ") is outside the vocabulary (vocab_size ", c.n_vocab, ")");
  return {};
}

Expected<ModelConfig> load_config(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return make_error(dir.string(), ": model folder does not exist or is not a directory");
  const fs::path path = dir / "config.json";
  if (!fs::exists(path, ec)) return make_error(path.string(), ": missing (every model folder needs a config.json)");
  auto j = read_json_file(path);
  if (!j) return j.error();
  auto c = parse_model_config(*j, path.string());
  if (!c) return c.error();
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    auto g = read_json_file(gen_path);
    if (!g) return g.error();
    MK_TRY(apply_generation_config(*g, gen_path.string(), *c));
  }
  return c;
}

}  // namespace mk
