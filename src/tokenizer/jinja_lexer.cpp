// Jinja lexer (see jinja_lexer.h). Mirrors jinja2/lexer.py: the data before each tag is stripped
// according to the tag's sign, and the end of a tag only counts when brackets inside it are balanced.
#include "tokenizer/jinja_lexer.h"

#include <cctype>
#include <cstring>

#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

std::string describe_position(std::string_view source, uint32_t offset) {
  int line = 1, col = 1;
  for (size_t k = 0; k < offset && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[k]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return cat("line ", line, ", column ", col);
}

namespace {

// Length of the whitespace run (Python's \s) starting at `pos`.
size_t space_run(const std::string& s, size_t pos) {
  size_t k = pos;
  while (k < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c < 0x80) {
      if (!py_isspace(c)) break;
      ++k;
      continue;
    }
    std::u32string one = decode_utf8(std::string_view(s).substr(k, (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : 2));
    if (one.empty() || !py_isspace(one[0])) break;
    k += (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : 2;
  }
  return k - pos;
}

bool all_space(std::string_view s) {
  for (char32_t c : decode_utf8(s))
    if (!py_isspace(c)) return false;
  return true;
}

std::string rstrip_space(std::string_view s) {
  std::u32string u = decode_utf8(s);
  while (!u.empty() && py_isspace(u.back())) u.pop_back();
  return encode_utf8(u);
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it.
Expected<std::string> unescape(std::string_view body, const std::string& src, uint32_t offset) {
  std::string out;
  auto hex = [&](size_t at, size_t n, uint32_t& v) {
    if (at + n > body.size()) return false;
    v = 0;
    for (size_t k = at; k < at + n; ++k) {
      char c = body[k];
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
      v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return true;
  };
  for (size_t k = 0; k < body.size(); ++k) {
    char c = body[k];
    if (c != '\\' || k + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++k];
    uint32_t v = 0;
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': case 'u': case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (!hex(k + 1, n, v) || v > 0x10FFFF)
          return make_error("invalid \\", e, " escape in string literal at ", describe_position(src, offset));
        append_utf8(out, v);
        k += n;
        break;
      }
      case 'N':
        return make_error("unsupported construct: \\N{...} escape in string literal at ",
                          describe_position(src, offset));
      default:
        if (e >= '0' && e <= '7') {
          v = 0;
          size_t n = 0;
          while (n < 3 && k < body.size() && body[k] >= '0' && body[k] <= '7') v = v * 8 + uint32_t(body[k++] - '0'), ++n;
          --k;
          append_utf8(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

const char* const OPERATORS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                 ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  Expected<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        push(Tok::Text, pos, s_.substr(pos));
        break;
      }
      char kind = s_[tag + 1];
      char sign = (tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+')) ? s_[tag + 2] : 0;
      std::string text = s_.substr(pos, tag - pos);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments, not {{
        size_t l_pos = text.rfind('\n');
        l_pos = (l_pos == std::string::npos) ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(std::string_view(text).substr(l_pos)))
          text.resize(l_pos);
      }
      if (!text.empty()) push(Tok::Text, pos, std::move(text));
      size_t body = tag + 2 + (sign ? 1 : 0);
      Expected<size_t> next = kind == '#' ? comment(tag, body) : kind == '%' ? block(tag, body) : variable(tag, body);
      if (!next) return next.error();
      pos = *next;
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    push(Tok::Eof, uint32_t(s_.size()), "");
    return std::move(out_);
  }

 private:
  void push(Tok t, size_t offset, std::string text) { out_.push_back(Token{t, uint32_t(offset), std::move(text)}); }
  Error error_at(size_t offset, const std::string& what) {
    return make_error(what, " at ", describe_position(s_, uint32_t(offset)));
  }

  size_t find_tag(size_t pos) const {
    for (size_t k = s_.find('{', pos); k != std::string::npos; k = s_.find('{', k + 1))
      if (k + 1 < s_.size() && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  // End of a block/comment tag at `k` ("%}" or "#}" preceded by an optional sign): where the text resumes.
  size_t after_block_end(size_t k, char sign) const {
    size_t end = k + 2;
    if (sign == '-') return end + space_run(s_, end);
    if (sign == '+') return end;
    return (end < s_.size() && s_[end] == '\n') ? end + 1 : end;  // trim_blocks
  }

  Expected<size_t> comment(size_t tag, size_t body) {
    size_t k = s_.find("#}", body);
    if (k == std::string::npos) return error_at(tag, "missing end of comment tag '#}'");
    char sign = (k > body && (s_[k - 1] == '-' || s_[k - 1] == '+')) ? s_[k - 1] : 0;
    return after_block_end(k, sign);
  }

  Expected<size_t> block(size_t tag, size_t body) {
    // {% raw %} ... {% endraw %}: the body is text.
    size_t k = body + space_run(s_, body);
    if (s_.compare(k, 3, "raw") == 0 && (k + 3 >= s_.size() || !(std::isalnum((unsigned char)s_[k + 3]) || s_[k + 3] == '_'))) {
      size_t e = k + 3 + space_run(s_, k + 3);
      size_t start;
      if (s_.compare(e, 3, "-%}") == 0) start = e + 3 + space_run(s_, e + 3);
      else if (s_.compare(e, 2, "%}") == 0) start = e + 2;
      else return error_at(tag, "expected '%}' after 'raw'");
      return raw_body(tag, start);
    }
    push(Tok::BlockBegin, tag, "");
    return inside(body, '%');
  }

  Expected<size_t> raw_body(size_t tag, size_t start) {
    for (size_t k = s_.find("{%", start); k != std::string::npos; k = s_.find("{%", k + 1)) {
      char sign = (k + 2 < s_.size() && (s_[k + 2] == '-' || s_[k + 2] == '+')) ? s_[k + 2] : 0;
      size_t w = k + 2 + (sign ? 1 : 0);
      w += space_run(s_, w);
      if (s_.compare(w, 6, "endraw") != 0) continue;
      size_t e = w + 6 + space_run(s_, w + 6);
      char esign = (s_.compare(e, 3, "-%}") == 0) ? '-' : (s_.compare(e, 3, "+%}") == 0) ? '+' : 0;
      size_t close = e + (esign ? 1 : 0);
      if (s_.compare(close, 2, "%}") != 0) continue;
      std::string text = s_.substr(start, k - start);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = (l_pos == std::string::npos) ? 0 : l_pos + 1;
        if (l_pos > 0 && l_pos < text.size() && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
      }
      if (!text.empty()) push(Tok::Text, start, std::move(text));
      return after_block_end(close, esign);
    }
    return error_at(tag, "missing '{% endraw %}' for '{% raw %}'");
  }

  Expected<size_t> variable(size_t tag, size_t body) {
    push(Tok::VarBegin, tag, "");
    return inside(body, '}');
  }

  // Tokens inside {{ }} (closer '}') or {% %} (closer '%') until the closing delimiter at bracket depth 0.
  Expected<size_t> inside(size_t pos, char closer) {
    std::vector<char> brackets;
    while (true) {
      pos += space_run(s_, pos);
      if (pos >= s_.size())
        return error_at(pos, closer == '%' ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (brackets.empty()) {
        if (closer == '%') {
          if (s_.compare(pos, 3, "-%}") == 0 || s_.compare(pos, 3, "+%}") == 0) {
            push(Tok::BlockEnd, pos, "");
            return after_block_end(pos + 1, s_[pos]);
          }
          if (s_.compare(pos, 2, "%}") == 0) {
            push(Tok::BlockEnd, pos, "");
            return after_block_end(pos, 0);
          }
        } else {
          if (s_.compare(pos, 3, "-}}") == 0) {
            push(Tok::VarEnd, pos, "");
            return pos + 3 + space_run(s_, pos + 3);
          }
          if (s_.compare(pos, 2, "}}") == 0) {
            push(Tok::VarEnd, pos, "");
            return pos + 2;
          }
        }
      }
      MK_TRY(one_token(pos, brackets));
    }
  }

  Status one_token(size_t& pos, std::vector<char>& brackets) {
    unsigned char c = static_cast<unsigned char>(s_[pos]);
    if (std::isdigit(c)) return number(pos);
    if (std::isalpha(c) || c == '_') {
      size_t e = pos;
      while (e < s_.size() && (std::isalnum((unsigned char)s_[e]) || s_[e] == '_')) ++e;
      push(Tok::Name, pos, s_.substr(pos, e - pos));
      pos = e;
      return {};
    }
    if (c == '\'' || c == '"') {
      size_t e = pos + 1;
      while (e < s_.size() && s_[e] != char(c)) e += (s_[e] == '\\') ? 2 : 1;
      if (e >= s_.size()) return error_at(pos, "unterminated string literal");
      auto value = unescape(std::string_view(s_).substr(pos + 1, e - pos - 1), s_, uint32_t(pos));
      if (!value) return value.error();
      push(Tok::String, pos, std::move(*value));
      pos = e + 1;
      return {};
    }
    for (const char* op : OPERATORS) {
      size_t n = std::strlen(op);
      if (s_.compare(pos, n, op) != 0) continue;
      char o = op[0];
      if (n == 1 && (o == '(' || o == '[' || o == '{')) brackets.push_back(o == '(' ? ')' : o == '[' ? ']' : '}');
      if (n == 1 && (o == ')' || o == ']' || o == '}')) {
        if (brackets.empty()) return error_at(pos, cat("unexpected '", o, "'"));
        if (brackets.back() != o) return error_at(pos, cat("unexpected '", o, "', expected '", brackets.back(), "'"));
        brackets.pop_back();
      }
      push(Tok::Op, pos, op);
      pos += n;
      return {};
    }
    return error_at(pos, cat("unexpected character '", s_[pos], "' in tag"));
  }

  // Integers (decimal with '_', 0b/0o/0x) and floats (fraction and/or exponent).
  Status number(size_t& pos) {
    size_t start = pos, e = pos;
    auto digits = [&](auto pred) {
      size_t b = e;
      while (e < s_.size() && (pred((unsigned char)s_[e]) || (s_[e] == '_' && e > b))) ++e;
    };
    auto is_dec = [](unsigned char ch) { return std::isdigit(ch) != 0; };
    if (s_[e] == '0' && e + 1 < s_.size() && std::strchr("bBoOxX", s_[e + 1]) && s_[e + 1] != 0) {
      char base_c = char(std::tolower(s_[e + 1]));
      int base = base_c == 'b' ? 2 : base_c == 'o' ? 8 : 16;
      e += 2;
      digits([&](unsigned char ch) { return base == 16 ? std::isxdigit(ch) != 0 : (ch >= '0' && ch < '0' + base); });
      std::string d;
      for (size_t k = start + 2; k < e; ++k)
        if (s_[k] != '_') d += s_[k];
      if (d.empty()) return error_at(start, "invalid integer literal");
      push(Tok::Int, start, s_.substr(start, e - start));
      out_.back().i = int64_t(std::stoull(d, nullptr, base));
      pos = e;
      return {};
    }
    digits(is_dec);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit((unsigned char)s_[e + 1])) {
      ++e;
      digits(is_dec);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && std::isdigit((unsigned char)s_[x])) {
        e = x;
        digits(is_dec);
        is_float = true;
      }
    }
    if (!is_float && s_[start] == '0') {  // jinja2's integers: "0", "0_0"...; "01" lexes as 0 then 1
      e = start + 1;
      while (e + 1 < s_.size() && (s_[e] == '0' || (s_[e] == '_' && s_[e + 1] == '0'))) ++e;
      if (e < s_.size() && s_[e] == '0') ++e;
    }
    std::string d;
    for (size_t k = start; k < e; ++k)
      if (s_[k] != '_') d += s_[k];
    push(is_float ? Tok::Float : Tok::Int, start, s_.substr(start, e - start));
    try {
      if (is_float) out_.back().f = std::stod(d);
      else out_.back().i = std::stoll(d);
    } catch (...) {
      return error_at(start, cat("unsupported construct: number literal '", d, "' out of range"));
    }
    pos = e;
    return {};
  }

  const std::string& s_;
  std::vector<Token> out_;
};

}  // namespace

Expected<std::vector<Token>> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace mk::jinja
