// Added-token matching (tokenizers' added_vocabulary.rs: find_matches with a leftmost-longest
// Aho-Corasick automaton). Word and space tests follow the Rust regex classes it uses: \w (Unicode word
// characters) and \s (White_Space).
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace mk::tok {

namespace {
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's \w: Alphabetic, marks, decimal numbers, connector punctuation, join controls. (Alphabetic
// is approximated by letters + letter numbers: it also holds a few symbols such as circled letters.)
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The last character of text[0..end) (end > 0).
char32_t char_before(std::string_view text, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  int len = 0;
  return utf8_decode(text.data() + b, len);
}

// Start of the run of white space that ends text[0..end).
size_t space_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    int len = 0;
    if (!is_white_space(utf8_decode(text.data() + b, len))) break;
    end = b;
  }
  return end;
}

// End of the run of white space that starts at text[begin].
size_t space_run_end(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    int len = 0;
    if (!is_white_space(utf8_decode(text.data() + begin, len))) break;
    begin += static_cast<size_t>(len);
  }
  return begin;
}
}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens,
                              const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  tokens_.clear();
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string& p = patterns[k];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : p) {
      auto& ch = nodes_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t(-1)));
      if (it != ch.end() && it->first == b) {
        node = it->second;
      } else {
        const int32_t fresh = static_cast<int32_t>(nodes_.size());
        ch.insert(it, {b, fresh});
        nodes_.push_back(Node{});
        node = fresh;
      }
    }
    if (nodes_[node].token < 0) {  // the same string twice: the first one wins
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(tokens[k]);
    }
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

size_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, int32_t& token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& ch = nodes_[node].children;
    const uint8_t b = static_cast<uint8_t>(text[i]);
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t(-1)));
    if (it == ch.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = i + 1 - pos;
      token = nodes_[node].token;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  if (text.empty()) return;
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t t = -1;
    const size_t len = first_byte_[static_cast<unsigned char>(text[pos])] ? longest_at(text, pos, t) : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the automaton goes on after the match whether or not it is kept
    const AddedToken& tok = *tokens_[static_cast<size_t>(t)];
    if (tok.single_word) {
      const bool start_space = start == 0 || !is_word_char(char_before(text, start));
      int n = 0;
      const bool stop_space = stop == text.size() || !is_word_char(utf8_decode(text.data() + stop, n));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(space_run_start(text, start), start_offset);
    if (tok.rstrip) stop = space_run_end(text, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace mk::tok
