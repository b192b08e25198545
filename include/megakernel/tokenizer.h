// Tokenizer: text <-> token ids for byte-level BPE models, loaded from a Hugging Face `tokenizer.json`
// (+ `tokenizer_config.json` for the BOS/EOS token strings). Gives exactly the ids of the Python package
// `tokenizers` (Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids) for the Llama 3 and
// Qwen2/Qwen3 files; tests/tokenizer/differential_test.py checks that.
//
// Supported tokenizer.json contents (anything else is a load error naming the field):
//   normalizer:    null | NFC | NFD | NFKC | NFKD | Sequence of these
//   pre_tokenizer: null | Split (Regex or String pattern, any behavior, invert) | ByteLevel | Sequence of these
//   model:         BPE (merges as "a b" strings or [a, b] pairs; ignore_merges, unk_token, fuse_unk,
//                  byte_fallback, continuing_subword_prefix, end_of_word_suffix; no dropout)
//   decoder:       null | ByteLevel
//   added_tokens:  special or not; lstrip / rstrip / single_word / normalized as `tokenizers` applies them
//                  (ids assigned as tokenizers' deserializer does)
// post_processor, truncation and padding are ignored (they do not apply with add_special_tokens=False on a
// single text). Regexes are written for Oniguruma; we run them with PCRE2 after making \s, \p{L}, \p{N},
// \d and \w match exactly Oniguruma's sets (src/tokenizer/regex_compat.h). Normalization matches the
// older Unicode tables of tokenizers' normalizer (src/tokenizer/normalizer.cpp).
//
// Invalid UTF-8 input: each maximal invalid subsequence becomes U+FFFD before anything else, the rule of
// Python's bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy. decode() follows
// the same rule for token bytes that do not form valid UTF-8.
//
// A Tokenizer is an immutable value with shared state: cheap to copy and move, safe to use from several
// threads at once.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mk {

class Tokenizer {
 public:
  // `dir_or_json`: a folder holding tokenizer.json (and optionally tokenizer_config.json), or the path of
  // a tokenizer.json file (tokenizer_config.json is then looked for beside it).
  static Expected<Tokenizer> load(const std::filesystem::path& dir_or_json);

  // Ids of `text` with add_special_tokens=False semantics: added/special token strings in the text become
  // their ids, no BOS/EOS is added.
  std::vector<int32_t> encode(std::string_view text) const;

  // Text of `ids` (tokenizers' decode). Unknown ids are skipped; with skip_special, special tokens are too.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The token's string as stored in the vocabulary (e.g. "Ġhello"), or "" for an unknown id.
  std::string token_text(int32_t id) const;
  // The raw bytes the token stands for (may be part of a UTF-8 character), or "" for an unknown id.
  std::string token_bytes(int32_t id) const;
  // Id of a vocabulary string or added-token content (token_text's inverse).
  std::optional<int32_t> token_id(std::string_view token_text) const;

  // One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  // From tokenizer_config.json's bos_token / eos_token (absent or null: none).
  std::optional<int32_t> bos_id() const;
  std::vector<int32_t> eos_ids() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

// Turns ids into text one at a time, never emitting half a UTF-8 character: bytes of an incomplete
// character are held until the next ids complete it. The concatenation of every push() and the final
// flush() equals tokenizer.decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  // Text that became complete with this id (possibly "").
  std::string push(int32_t id);
  // Whatever is still held (an incomplete character becomes U+FFFD); the decoder is then empty again.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  bool started_ = false;  // a token was emitted (decoders that join tokens with spaces)
  std::string pending_;  // [< 4 bytes] the start of a UTF-8 character not yet complete
};

}  // namespace mk
