// Oniguruma -> PCRE2 pattern rewriting (see regex_compat.h). Walks the pattern once, tracking escapes,
// \Q..\E quoting and character classes (with POSIX [:name:] items inside them).
#include "tokenizer/regex_compat.h"

#include <string_view>

#include "tokenizer/unicode_tables.inc"

namespace mk::tok {

namespace {
// What to put in place of an escape: `inside` a class (items only) or outside one (a whole class);
// empty when the escape stays as it is.
std::string replacement(std::string_view esc, bool in_class) {
  std::string items;
  bool negate = false;
  if (esc == "\\s") items = MK_ONIG_SPACE;
  else if (esc == "\\S") items = MK_ONIG_SPACE, negate = true;
  else if (esc == "\\p{L}" || esc == "\\pL") items = std::string("\\p{L}") + MK_ONIG_EXTRA_L;
  else if (esc == "\\P{L}" || esc == "\\PL") items = std::string("\\p{L}") + MK_ONIG_EXTRA_L, negate = true;
  else if (esc == "\\p{N}" || esc == "\\pN") items = std::string("\\p{N}") + MK_ONIG_EXTRA_N;
  else if (esc == "\\P{N}" || esc == "\\PN") items = std::string("\\p{N}") + MK_ONIG_EXTRA_N, negate = true;
  else if (esc == "\\d") items = std::string("\\p{Nd}") + MK_ONIG_EXTRA_ND;
  else if (esc == "\\D") items = std::string("\\p{Nd}") + MK_ONIG_EXTRA_ND, negate = true;
  else if (esc == "\\w") items = std::string("\\p{L}\\p{M}\\p{Nd}\\p{Pc}") + MK_ONIG_EXTRA_W;
  else if (esc == "\\W") items = std::string("\\p{L}\\p{M}\\p{Nd}\\p{Pc}") + MK_ONIG_EXTRA_W, negate = true;
  else return {};
  if (in_class) return negate ? std::string() : items;
  return (negate ? "[^" : "[") + items + "]";
}

// Length of the escape sequence starting at p[i] == '\\' (the part that names one item).
size_t escape_length(const std::string& p, size_t i) {
  if (i + 1 >= p.size()) return 1;
  const char c = p[i + 1];
  if ((c == 'p' || c == 'P') && i + 2 < p.size()) {
    if (p[i + 2] == '{') {
      const size_t close = p.find('}', i + 3);
      return close == std::string::npos ? p.size() - i : close + 1 - i;
    }
    return 3;  // \pL
  }
  return 2;
}
}  // namespace

std::string onig_compatible_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 < p.size() && p[i + 1] == 'Q') {  // \Q...\E: copied as is
        const size_t end = p.find("\\E", i + 2);
        const size_t stop = end == std::string::npos ? p.size() : end + 2;
        out.append(p, i, stop - i);
        i = stop;
        continue;
      }
      const size_t n = escape_length(p, i);
      const std::string_view esc(p.data() + i, n);
      const std::string rep = replacement(esc, in_class);
      if (rep.empty()) out.append(esc);
      else out += rep;
      i += n;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      const size_t stop = end == std::string::npos ? i + 1 : end + 2;
      out.append(p, i, stop - i);
      i = stop;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
    ++i;
  }
  return out;
}

}  // namespace mk::tok
