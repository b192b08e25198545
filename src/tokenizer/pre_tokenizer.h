// Pre-tokenizers of tokenizer.json that we support: Split (regex or literal pattern, every delimiter
// behavior, invert), ByteLevel (optional prefix space and GPT-2 regex; the byte -> alphabet mapping), and
// Sequences of these. A pre-tokenizer cuts a normalized segment into pieces that the model encodes one by
// one.
#pragma once
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace mk::tok {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind;
  // Split: `regex` (a literal pattern is escaped into one), applied as `behavior`, `invert`ed or not.
  Regex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = false;  // split with the GPT-2 regex (held in `regex`)
};

// Pieces of a segment. Piece text lives either in the caller's segment or in `arena` (text a step had to
// rewrite: a prefix space, the byte-level mapping ahead of later steps).
struct Pieces {
  std::vector<std::string_view> list;
  std::deque<std::string> arena;  // owned text (a deque: growing it keeps earlier strings in place)
};

class PreTokenizer {
 public:
  static Expected<PreTokenizer> from_json(const nlohmann::json& j, const std::string& where);

  // Cuts `segment` into pieces (appended to `out`). When byte_level_deferred() is true the pieces are still
  // raw bytes: the model maps them to the byte-level alphabet itself (cheaper, and cacheable on raw text).
  void run(std::string_view segment, Pieces& out) const;
  bool byte_level_deferred() const { return defer_byte_level_; }

 private:
  std::vector<PreTokenizerStep> steps_;
  bool defer_byte_level_ = false;  // the last step is a ByteLevel mapping: leave it to the model
  Expected<bool> add_step(const nlohmann::json& j, const std::string& where);
};

// Applies the split `behavior` to `text` given the pattern's matches (tokenizers' NormalizedString::split);
// appends the resulting non-empty pieces to `out`.
void split_by_matches(std::string_view text, const std::vector<Span>& matches, SplitBehavior behavior,
                      bool invert, std::vector<std::string_view>& out);

}  // namespace mk::tok
