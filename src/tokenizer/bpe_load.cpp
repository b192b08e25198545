// BPE model loading from tokenizer.json: vocabulary, merges (as "a b" strings or [a, b] pairs), options.
// Errors name the field (e.g. model.merges[12]) and what was expected.
#include <atomic>
#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"

namespace mk::tok {

namespace {
std::atomic<uint64_t> next_instance{1};

Expected<std::string> optional_string(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return std::string();
  if (!j[key].is_string()) return make_error(where, ".", key, ": expected a string or null");
  return j[key].get<std::string>();
}
}  // namespace

std::string parse_merge(const nlohmann::json& m, size_t i, std::string& left, std::string& right) {
  if (m.is_string()) {  // legacy "a b"
    const std::string& line = m.get_ref<const std::string&>();
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      return cat(".merges[", i, "]: expected \"left right\" (two tokens, one space), got \"", line, "\"");
    left = line.substr(0, sp);
    right = line.substr(sp + 1);
  } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    left = m[0].get<std::string>();
    right = m[1].get<std::string>();
  } else {
    return cat(".merges[", i, "]: expected a string \"left right\" or a pair [left, right]");
  }
  return {};
}

Status Bpe::load_vocab(const nlohmann::json& j, const std::string& where, const BpeTables* tables) {
  int32_t max_id = -1;
  if (tables && tables->has_vocab) {
    if (!tables->vocab_error.empty()) return make_error(where, tables->vocab_error);
    vocab_.reserve(tables->vocab.size());
    for (const auto& [token, id] : tables->vocab) MK_TRY(add_vocab_entry(token, id, max_id));
  } else {
    if (!j.contains("vocab") || !j["vocab"].is_object())
      return make_error(where, ".vocab: expected an object mapping token strings to ids");
    for (auto it = j["vocab"].begin(); it != j["vocab"].end(); ++it) {
      if (!it.value().is_number_integer())
        return make_error(where, ".vocab[\"", it.key(), "\"]: expected an id in [0, 2^30), got ", it.value().dump());
      MK_TRY(add_vocab_entry(it.key(), it.value().get<int64_t>(), max_id));
    }
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = token;
  return {};
}

Status Bpe::add_vocab_entry(const std::string& token, int64_t id, int32_t& max_id) {
  if (id < 0 || id >= (int64_t(1) << 30))
    return make_error(".vocab[\"", token, "\"]: expected an id in [0, 2^30), got ", id);
  vocab_.insert_or_assign(token, static_cast<int32_t>(id));  // a repeated key: the last one wins
  max_id = std::max(max_id, static_cast<int32_t>(id));
  return {};
}

Status Bpe::add_merge(size_t i, const std::string& left, const std::string& right, const std::string& where) {
  auto l = vocab_.find(left), r = vocab_.find(right);
  if (l == vocab_.end()) return make_error(where, ".merges[", i, "]: token \"", left, "\" is not in model.vocab");
  if (r == vocab_.end()) return make_error(where, ".merges[", i, "]: token \"", right, "\" is not in model.vocab");
  if (right.size() < prefix_.size())
    return make_error(where, ".merges[", i, "]: \"", right, "\" is shorter than continuing_subword_prefix");
  const std::string merged = left + right.substr(prefix_.size());
  auto n = vocab_.find(merged);
  if (n == vocab_.end())
    return make_error(where, ".merges[", i, "]: merged token \"", merged, "\" is not in model.vocab");
  // A repeated pair keeps its last rank, as tokenizers' merge map does.
  merges_[uint64_t(uint32_t(l->second)) << 32 | uint32_t(r->second)] = Merge{int32_t(i), n->second};
  return {};
}

Status Bpe::load_merges(const nlohmann::json& j, const std::string& where, const BpeTables* tables) {
  if (tables && tables->has_merges) {
    if (!tables->merges_error.empty()) return make_error(where, tables->merges_error);
    merges_.reserve(tables->merges.size());
    for (size_t i = 0; i < tables->merges.size(); ++i)
      MK_TRY(add_merge(i, tables->merges[i].first, tables->merges[i].second, where));
    return {};
  }
  if (!j.contains("merges")) return {};
  if (!j["merges"].is_array()) return make_error(where, ".merges: expected an array");
  const nlohmann::json& merges = j["merges"];
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string left, right, error = parse_merge(merges[i], i, left, right);
    if (!error.empty()) return make_error(where, error);
    MK_TRY(add_merge(i, left, right, where));
  }
  return {};
}

Expected<Bpe> Bpe::from_json(const nlohmann::json& j, const std::string& where, bool byte_level,
                             const BpeTables* tables) {
  if (!j.is_object()) return make_error(where, ": expected an object");
  const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type != "BPE")
    return make_error(where, ".type: unsupported model \"", type, "\" (only BPE is supported)");
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0)
    return make_error(where, ".dropout: BPE dropout is not supported (expected null or 0)");
  Bpe bpe;
  bpe.instance_ = next_instance.fetch_add(1);
  bpe.byte_level_ = byte_level;
  bpe.ignore_merges_ = j.value("ignore_merges", false);
  bpe.fuse_unk_ = j.value("fuse_unk", false);
  bpe.byte_fallback_ = j.value("byte_fallback", false);
  auto prefix = optional_string(j, "continuing_subword_prefix", where);
  auto suffix = optional_string(j, "end_of_word_suffix", where);
  auto unk = optional_string(j, "unk_token", where);
  if (!prefix) return prefix.error();
  if (!suffix) return suffix.error();
  if (!unk) return unk.error();
  bpe.prefix_ = *prefix;
  bpe.suffix_ = *suffix;

  auto vocab_status = bpe.load_vocab(j, where, tables);
  if (!vocab_status) {  // add_vocab_entry's message lacks the prefix
    const std::string& m = vocab_status.message();
    return make_error(m.rfind(where, 0) == 0 ? m : where + m);
  }
  MK_TRY(bpe.load_merges(j, where, tables));
  if (!unk->empty()) {
    auto it = bpe.vocab_.find(*unk);
    if (it == bpe.vocab_.end()) return make_error(where, ".unk_token: \"", *unk, "\" is not in model.vocab");
    bpe.unk_id_ = it->second;
  }
  bpe.fast_bytes_ = byte_level && bpe.prefix_.empty() && bpe.suffix_.empty();
  if (byte_level) {
    for (int b = 0; b < 256; ++b) {
      auto it = bpe.vocab_.find(byte_to_utf8(static_cast<uint8_t>(b)));
      bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
    }
    std::string raw;
    for (const auto& [token, id] : bpe.vocab_) {
      raw.clear();
      if (byte_level_decode(raw, token)) bpe.raw_vocab_.emplace(raw, id);
    }
  }
  return bpe;
}

}  // namespace mk::tok
