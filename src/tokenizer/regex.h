// A compiled PCRE2 pattern (UTF + UCP, JIT when available) with an iterator over non-overlapping matches,
// the way tokenizers' Split pre-tokenizer walks its Oniguruma regex. Thread-safe: match state is per call.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mk::tok {

struct Span {
  size_t begin, end;  // byte offsets, [begin, end)
};

class Regex {
 public:
  // Compiles `pattern` (Oniguruma syntax as in tokenizer.json, made PCRE2-exact by regex_compat.h); the
  // error names `where` and PCRE2's message.
  static Expected<Regex> compile(const std::string& pattern, const std::string& where);

  // Appends the non-overlapping matches in `text` (well-formed UTF-8), left to right. An empty match is
  // kept (it still splits the text) unless it touches the end of the previous match.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  struct Code;

 private:
  std::shared_ptr<const Code> code_;
};

}  // namespace mk::tok
