// Lexer of the Jinja interpreter: template source -> tokens, mirroring jinja2's lexer with
// trim_blocks=True and lstrip_blocks=True (what transformers uses): `{%-`/`-%}` strip all whitespace,
// `{%+` turns lstrip off for one tag, `+%}` turns trim off, one trailing newline of the source is dropped,
// and \r\n / \r become \n. Comments vanish; {% raw %} bodies become text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mk::jinja {

enum class Tok : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  uint32_t offset;   // byte offset in the (newline-normalised) source, for line:column
  std::string text;  // Text: the text; Name/Op: the spelling; String: the unescaped value
  int64_t i = 0;     // Int
  double f = 0;      // Float
};

// Newline normalisation and trailing-newline removal, as jinja2 does before lexing.
std::string normalize_source(std::string_view source);

// `source` must be normalised already. Errors name line:column.
Expected<std::vector<Token>> lex(const std::string& source);

// "line L, column C" of a byte offset (columns count code points, from 1).
std::string describe_position(std::string_view source, uint32_t offset);

}  // namespace mk::jinja
