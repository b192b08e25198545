// Python string semantics for the Jinja interpreter (see jinja_strings.h).
#include "tokenizer/jinja_strings.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

namespace mk::jinja {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t n = static_cast<utf8proc_ssize_t>(s.size());
  for (utf8proc_ssize_t i = 0; i < n;) {
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &c);
    if (len <= 0) {
      out.push_back(0xFFFD);
      i += 1;
    } else {
      out.push_back(static_cast<char32_t>(c));
      i += len;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t len = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  if (len <= 0) {  // lone surrogate or out of range: U+FFFD
    out += "\xEF\xBF\xBD";
    return;
  }
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(len));
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x9: case 0xA: case 0xB: case 0xC: case 0xD: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  // Fast path: whitespace stripping that stops at ASCII bytes on both ends needs no decoding.
  if (!chars) {
    size_t b = 0, e = s.size();
    bool ascii_edges = true;
    if (left)
      for (; b < e; ++b) {
        auto c = static_cast<unsigned char>(s[b]);
        if (c >= 0x80) ascii_edges = false;
        if (c >= 0x80 || !py_isspace(c)) break;
      }
    if (right)
      for (; e > b; --e) {
        auto c = static_cast<unsigned char>(s[e - 1]);
        if (c >= 0x80) ascii_edges = false;
        if (c >= 0x80 || !py_isspace(c)) break;
      }
    if (ascii_edges) return std::string(s.substr(b, e - b));
  }
  std::u32string u = decode_utf8(s);
  std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode_utf8(s);
  size_t i = 0, n = u.size();
  while (true) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode_utf8(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(u[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = decode_utf8(s);
    size_t j = u.size();
    while (true) {
      while (j > 0 && py_isspace(u[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode_utf8(std::u32string_view(u).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !py_isspace(u[i - 1])) --i;
      out.push_back(encode_utf8(std::u32string_view(u).substr(i, j - i)));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode_utf8(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0xB || c == 0xC || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (!is_break(u[i])) {
      ++i;
      continue;
    }
    size_t brk = (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    size_t end = keepends ? i + brk : i;
    out.push_back(encode_utf8(std::u32string_view(u).substr(start, end - start)));
    i += brk;
    start = i;
  }
  if (start < u.size()) out.push_back(encode_utf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` between every code point (and at both ends)
    std::u32string u = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return utf8_length(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

namespace {
enum class Case { Upper, Lower, Title };

// Python's full case mappings where they differ from the one-to-one ones utf8proc gives (SpecialCasing.txt,
// unconditional Latin entries); other characters use utf8proc's simple mappings.
void append_case(std::string& out, char32_t c, Case mode) {
  const char* special = nullptr;
  if (mode != Case::Lower) {
    bool up = mode == Case::Upper;
    switch (c) {
      case 0xDF: special = up ? "SS" : "Ss"; break;
      case 0xFB00: special = up ? "FF" : "Ff"; break;
      case 0xFB01: special = up ? "FI" : "Fi"; break;
      case 0xFB02: special = up ? "FL" : "Fl"; break;
      case 0xFB03: special = up ? "FFI" : "Ffi"; break;
      case 0xFB04: special = up ? "FFL" : "Ffl"; break;
      case 0xFB05: case 0xFB06: special = up ? "ST" : "St"; break;
      case 0x149: special = "\xCA\xBCN"; break;
      default: break;
    }
  } else if (c == 0x130) {
    special = "i\xCC\x87";
  }
  if (special) {
    out += special;
    return;
  }
  auto cc = static_cast<utf8proc_int32_t>(c);
  auto mapped = mode == Case::Upper ? utf8proc_toupper(cc) : mode == Case::Lower ? utf8proc_tolower(cc) : utf8proc_totitle(cc);
  append_utf8(out, static_cast<char32_t>(mapped));
}

std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode_utf8(s)) append_case(out, c, upper ? Case::Upper : Case::Lower);
  return out;
}
bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
}  // namespace

std::string py_upper(std::string_view s) { return map_case(s, true); }
std::string py_lower(std::string_view s) { return map_case(s, false); }

std::string py_capitalize(std::string_view s) {
  std::u32string u = decode_utf8(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) append_case(out, u[i], i == 0 ? Case::Title : Case::Lower);
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : decode_utf8(s)) {
    append_case(out, c, prev_cased ? Case::Lower : Case::Title);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (py_isprintable(c)) {
      append_utf8(out, c);
    } else {
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string py_repr_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form: "d.ddde+XX".
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python's repr switches to exponent form outside [1e-4, 1e16)
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + buf;
}

}  // namespace mk::jinja
