// The state behind mk::Tokenizer (include/megakernel/tokenizer.h): the pipeline of tokenizers'
// TokenizerImpl (added tokens -> normalizer -> pre-tokenizer -> BPE model; decoder), built by
// tokenizer_load.cpp and used by tokenizer.cpp and stream_decoder.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megakernel/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace mk {

enum class DecoderKind { None, ByteLevel };

struct Tokenizer::Impl {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::Bpe model;
  DecoderKind decoder = DecoderKind::None;

  std::vector<tok::AddedToken> added;          // in the order of tokenizer.json, ids as tokenizers assigns them
  tok::StringIdMap added_ids;                  // content -> id
  tok::AddedTokenMatcher raw_matcher;          // added tokens with normalized=false, matched on the raw text
  tok::AddedTokenMatcher normalized_matcher;   // normalized=true, matched on the normalized text

  int32_t n_vocab = 0;                          // one past the largest id
  std::vector<std::string> text_of;             // [n_vocab] token string (added content first), "" if none
  std::vector<std::string> bytes_of;            // [n_vocab] what the decoder makes of the token alone
  std::vector<uint8_t> known;                   // [n_vocab] 1 when the id has a token
  std::vector<uint8_t> special;                 // [n_vocab] 1 for added tokens with special=true

  std::optional<int32_t> bos;
  std::vector<int32_t> eos;

  // Appends the ids of a text segment that holds no raw-matched added token.
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) const;
  // Appends the ids of normalized text (pre-tokenize, then BPE on each piece).
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;
  bool emits(int32_t id, bool skip_special) const {
    return id >= 0 && id < n_vocab && known[static_cast<size_t>(id)] &&
           !(skip_special && special[static_cast<size_t>(id)]);
  }
};

}  // namespace mk
