// The BPE model of tokenizer.json: vocabulary, ranked merges, and the merge loop (tokenizers'
// models/bpe/word.rs: a min-heap of candidate merges by (rank, position) over a linked list of symbols),
// with a per-thread cache of encoded pieces.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace mk::tok {

// Transparent string hashing so that maps keyed by std::string can be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// model.vocab and model.merges taken out of tokenizer.json while it is parsed (tokenizer_load.cpp): kept in
// the JSON document they would cost more than the whole rest of the load.
struct BpeTables {
  bool has_vocab = false, has_merges = false;  // seen as an object / an array
  std::vector<std::pair<std::string, int64_t>> vocab;   // in file order
  std::vector<std::pair<std::string, std::string>> merges;
  std::string vocab_error, merges_error;               // the first malformed entry, if any
};

// Reads one entry of model.merges (i: its index, for the error); returns "" or the error ".merges[i]: ...".
std::string parse_merge(const nlohmann::json& m, size_t i, std::string& left, std::string& right);

class Bpe {
 public:
  // From the "model" value of tokenizer.json (its vocab and merges from `tables` when it holds them).
  // `byte_level`: pieces arrive as raw bytes and are mapped to the byte-level alphabet here (the
  // pre-tokenizer ends with ByteLevel).
  static Expected<Bpe> from_json(const nlohmann::json& j, const std::string& where, bool byte_level,
                                 const BpeTables* tables = nullptr);

  // Appends the ids of one pre-tokenized piece (non-empty) to `out`.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  const StringIdMap& vocab() const { return vocab_; }
  // [n_ids] vocabulary string of each id ("" where an id has no entry)
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  uint64_t instance() const { return instance_; }

 private:
  struct Merge {
    int32_t rank, new_id;
  };
  StringIdMap vocab_;                           // vocabulary string -> id
  std::vector<std::string> id_to_token_;        // [max id + 1]
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank and merged id
  StringIdMap raw_vocab_;                       // byte_level: raw bytes of each alphabet token -> id
  int32_t byte_ids_[256];                       // byte_level: id of each byte's alphabet character (-1: none)
  bool byte_level_ = false;
  bool fast_bytes_ = false;  // byte_level without subword prefix/suffix: work on raw bytes directly
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  uint64_t instance_ = 0;        // tells this model's cache entries from another's

  Status load_vocab(const nlohmann::json& j, const std::string& where, const BpeTables* tables);
  Status load_merges(const nlohmann::json& j, const std::string& where, const BpeTables* tables);
  Status add_vocab_entry(const std::string& token, int64_t id, int32_t& max_id);
  Status add_merge(size_t i, const std::string& left, const std::string& right, const std::string& where);
  void merge_symbols(std::vector<int32_t>& ids) const;
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
};

}  // namespace mk::tok
