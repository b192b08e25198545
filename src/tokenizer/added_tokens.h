// Added tokens of tokenizer.json ("added_tokens"): strings cut out of the text before normalization
// (normalized=false) or after it (normalized=true) and encoded as their own ids, with tokenizers'
// matching rules (added_vocabulary.rs): leftmost-longest, single_word, lstrip, rstrip.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mk::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = true;
};

// A piece of text: an added token (`id` >= 0) or text still to encode (`id` == -1).
struct Segment {
  size_t begin, end;  // byte offsets into the text that was split
  int32_t id;
};

// Finds the occurrences of a fixed set of token strings (a byte trie walked at each position).
class AddedTokenMatcher {
 public:
  // `tokens[k].content` (as given by `patterns[k]`) is matched; empty patterns are ignored.
  void build(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` (tokenizers' AddedVocabulary::find_matches); segments cover the text in order, except
  // where an rstrip token's trailing spaces overlap the next match (as in tokenizers).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index, sorted by byte
    int32_t token = -1;                                 // index into tokens_ of the string ending here
  };
  std::vector<Node> nodes_;               // [0] is the root
  std::vector<const AddedToken*> tokens_;
  bool first_byte_[256] = {};             // bytes that start some pattern

  // Length of the longest pattern starting at text[pos] (0: none) and its token index.
  size_t longest_at(std::string_view text, size_t pos, int32_t& token) const;
};

}  // namespace mk::tok
