// Tokenizer::load: reads tokenizer.json (+ tokenizer_config.json) and builds the pipeline. Added tokens get
// their ids the way tokenizers' deserializer assigns them (the model's id when the content is in the
// vocabulary, else the next id after the model's vocabulary size).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megakernel/tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace mk {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

Expected<std::string> read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return make_error("cannot open ", path.string(), ": no such file or not readable (expected a folder holding "
                      "tokenizer.json, or the tokenizer.json file itself)");
  std::ostringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

Expected<json> read_json(const fs::path& path) {
  auto text = read_text(path);
  if (!text) return text.error();
  try {
    return json::parse(*text);
  } catch (const json::parse_error& e) {
    return make_error(path.string(), ": invalid JSON at byte ", e.byte, ": ", e.what());
  }
}

// Parses tokenizer.json, moving model.vocab and model.merges into `tables` instead of the document.
// (Container events come at their own depth, members at depth + 1: the top object is 0, "model" 1,
// its "vocab" object 2, vocab entries 3.)
Expected<json> read_tokenizer_json(const fs::path& path, tok::BpeTables& tables) {
  auto text = read_text(path);
  if (!text) return text.error();
  std::string keys[4];  // the last key seen at depths 0..3
  bool in_vocab = false, in_merges = false;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    using E = json::parse_event_t;
    const bool model_child = depth == 2 && keys[1] == "model";
    switch (event) {
      case E::key:
        if (depth < 4) keys[depth] = parsed.get<std::string>();
        return true;
      case E::object_start:
        if (model_child && keys[2] == "vocab") in_vocab = tables.has_vocab = true;
        return true;
      case E::array_start:
        if (model_child && keys[2] == "merges") in_merges = tables.has_merges = true;
        return true;
      case E::object_end:
      case E::array_end:
        if (depth == 2) in_vocab = in_merges = false;
        if (depth != 3 || (!in_vocab && !in_merges)) return true;
        break;  // a whole [left, right] pair of model.merges (or a malformed vocab entry)
      case E::value:
        if (depth != 3 || (!in_vocab && !in_merges)) return true;
        break;
    }
    if (in_vocab) {
      if (parsed.is_number_integer()) tables.vocab.emplace_back(keys[3], parsed.get<int64_t>());
      else if (tables.vocab_error.empty())
        tables.vocab_error = cat(".vocab[\"", keys[3], "\"]: expected an id in [0, 2^30), got ", parsed.dump());
      return false;
    }
    std::string left, right;
    std::string error = tok::parse_merge(parsed, tables.merges.size(), left, right);
    if (!error.empty() && tables.merges_error.empty()) tables.merges_error = error;
    tables.merges.emplace_back(std::move(left), std::move(right));
    return false;
  };
  try {
    return json::parse(*text, callback);
  } catch (const json::parse_error& e) {
    return make_error(path.string(), ": invalid JSON at byte ", e.byte, ": ", e.what());
  }
}

bool flag(const json& t, const char* key, bool fallback) {
  return t.contains(key) && t[key].is_boolean() ? t[key].get<bool>() : fallback;
}

Status load_added_tokens(const json& list, const std::string& where, Tokenizer::Impl& im) {
  if (list.is_null()) return {};
  if (!list.is_array()) return make_error(where, ": expected an array");
  const int32_t model_size = static_cast<int32_t>(im.model.vocab().size());
  int32_t next_id = model_size;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& t = list[k];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
      return make_error(where, "[", k, "].content: expected a string");
    tok::AddedToken a;
    a.content = t["content"].get<std::string>();
    a.special = flag(t, "special", false);
    a.single_word = flag(t, "single_word", false);
    a.lstrip = flag(t, "lstrip", false);
    a.rstrip = flag(t, "rstrip", false);
    a.normalized = flag(t, "normalized", !a.special);
    if (a.content.empty()) continue;
    auto existing = im.added_ids.find(a.content);
    if (existing != im.added_ids.end()) {  // the same content again: its flags replace the earlier ones
      for (auto& e : im.added)
        if (e.content == a.content) a.id = e.id, e = a;
      continue;
    }
    auto in_model = im.model.vocab().find(a.content);
    a.id = in_model != im.model.vocab().end() ? in_model->second : next_id++;
    im.added_ids.emplace(a.content, a.id);
    im.added.push_back(std::move(a));
  }
  std::vector<const tok::AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const auto& a : im.added) {
    if (a.normalized) {
      normalized.push_back(&a);
      normalized_patterns.push_back(im.normalizer.apply(a.content));
    } else {
      raw.push_back(&a);
      raw_patterns.push_back(a.content);
    }
  }
  im.raw_matcher.build(raw, raw_patterns);
  im.normalized_matcher.build(normalized, normalized_patterns);
  return {};
}

// Per-id tables for decoding: token string, decoded bytes, flags.
void build_id_tables(Tokenizer::Impl& im) {
  const auto& model_tokens = im.model.id_to_token();
  int32_t n = static_cast<int32_t>(model_tokens.size());
  for (const auto& a : im.added) n = std::max(n, a.id + 1);
  im.n_vocab = n;
  im.text_of.assign(static_cast<size_t>(n), std::string());
  im.known.assign(static_cast<size_t>(n), 0);
  im.special.assign(static_cast<size_t>(n), 0);
  for (const auto& [token, id] : im.model.vocab()) {
    im.text_of[static_cast<size_t>(id)] = token;
    im.known[static_cast<size_t>(id)] = 1;
  }
  for (const auto& a : im.added) {  // added tokens take precedence (tokenizers' simple_id_to_token)
    im.text_of[static_cast<size_t>(a.id)] = a.normalized ? im.normalizer.apply(a.content) : a.content;
    im.known[static_cast<size_t>(a.id)] = 1;
    im.special[static_cast<size_t>(a.id)] = a.special;
  }
  im.bytes_of.assign(static_cast<size_t>(n), std::string());
  for (size_t id = 0; id < static_cast<size_t>(n); ++id) {
    const std::string& t = im.text_of[id];
    // ByteLevel decoder: a token whose characters are all in the alphabet stands for those bytes; any
    // other token for its own UTF-8.
    if (im.decoder != DecoderKind::ByteLevel || !tok::byte_level_decode(im.bytes_of[id], t)) im.bytes_of[id] = t;
  }
}

// bos_token / eos_token of tokenizer_config.json: a string, {"content": string}, or null.
Expected<std::optional<int32_t>> config_token(const json& config, const char* key, const std::string& where,
                                              const Tokenizer& t) {
  if (!config.contains(key) || config[key].is_null()) return std::optional<int32_t>();
  const json& v = config[key];
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
  else return make_error(where, ": ", key, ": expected a string, {\"content\": string} or null");
  auto id = t.token_id(content);
  if (!id) return make_error(where, ": ", key, ": token \"", content, "\" is not in the tokenizer's vocabulary");
  return std::optional<int32_t>(*id);
}
}  // namespace

Expected<Tokenizer> Tokenizer::load(const fs::path& dir_or_json) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(dir_or_json, ec);
  const fs::path json_path = is_dir ? dir_or_json / "tokenizer.json" : dir_or_json;
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  tok::BpeTables tables;
  auto j = read_tokenizer_json(json_path, tables);
  if (!j) return j.error();
  const std::string where = json_path.string() + ": ";
  if (!j->is_object() || !j->contains("model")) return make_error(where, "expected an object with a \"model\"");

  auto im = std::make_shared<Impl>();
  const json null_json;
  auto field = [&](const char* key) -> const json& { return j->contains(key) ? (*j)[key] : null_json; };
  auto normalizer = tok::Normalizer::from_json(field("normalizer"), where + "normalizer");
  if (!normalizer) return normalizer.error();
  im->normalizer = std::move(*normalizer);
  auto pre = tok::PreTokenizer::from_json(field("pre_tokenizer"), where + "pre_tokenizer");
  if (!pre) return pre.error();
  im->pre_tokenizer = std::move(*pre);
  auto model = tok::Bpe::from_json(field("model"), where + "model", im->pre_tokenizer.byte_level_deferred(),
                                   &tables);
  if (!model) return model.error();
  im->model = std::move(*model);
  const json& decoder = field("decoder");
  if (decoder.is_object() && decoder.value("type", "") == "ByteLevel") im->decoder = DecoderKind::ByteLevel;
  else if (!decoder.is_null())
    return make_error(where, "decoder: unsupported decoder ", decoder.dump().substr(0, 80),
                      " (supported: ByteLevel or null)");
  MK_TRY(load_added_tokens(field("added_tokens"), where + "added_tokens", *im));
  build_id_tables(*im);

  Tokenizer t(im);
  if (fs::exists(config_path, ec)) {
    auto config = read_json(config_path);
    if (!config) return config.error();
    auto bos = config_token(*config, "bos_token", config_path.string(), t);
    if (!bos) return bos.error();
    auto eos = config_token(*config, "eos_token", config_path.string(), t);
    if (!eos) return eos.error();
    im->bos = *bos;
    if (*eos) im->eos.push_back(**eos);
  }
  return t;
}

}  // namespace mk
