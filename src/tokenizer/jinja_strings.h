// String helpers with Python's semantics (code points, str.isspace, strip/split/upper/lower) for the Jinja
// interpreter: jinja2 runs on Python strings, so lengths, slices and whitespace must count code points.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mk::jinja {

// UTF-8 <-> code points. Invalid bytes decode to U+FFFD (one per byte).
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
int64_t utf8_length(std::string_view s);  // number of code points

bool py_isspace(char32_t c);  // Python str.isspace() for one code point
bool py_isprintable(char32_t c);

// str.strip / lstrip / rstrip; `chars` absent = whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit; sep must not be empty (caller checks).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t py_count(std::string_view s, std::string_view sub);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first upper, rest lower
std::string py_title(std::string_view s);       // str.title()

// Python's repr() of a str: quotes chosen as Python does, escapes for non-printable characters.
std::string py_repr_string(std::string_view s);
// Python's repr() of a float (shortest round trip, 'e' notation outside 1e-4 <= |x| < 1e16).
std::string py_repr_float(double x);

}  // namespace mk::jinja
