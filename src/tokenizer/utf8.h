// UTF-8 helpers for the tokenizer: validation with the "maximal subpart" replacement rule (each maximal
// invalid subsequence becomes U+FFFD, as Python's errors="replace" and Rust's from_utf8_lossy do), code
// point decoding/encoding, and the split point a streaming decoder may emit up to.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mk::tok {

inline constexpr std::string_view REPLACEMENT_UTF8 = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at s[0..n) (1..4), or -(k) where k >= 1 is the length of the
// maximal invalid subpart to replace with one U+FFFD, or 0 when s is a proper prefix of a valid sequence
// that the end of the buffer cut short (only when n < needed length).
int utf8_sequence(const unsigned char* s, size_t n);

// True when the whole of `s` is well-formed UTF-8.
bool utf8_is_valid(std::string_view s);

// `s` with each maximal invalid subsequence (including a truncated sequence at the end) replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);

// Appends `s` to `out` with the replacement rule applied; returns bytes of `s` held back because they
// might start a character that later bytes complete (0 when `final`: then they are replaced too).
size_t utf8_append_sanitized(std::string& out, std::string_view s, bool final);

// Decodes the well-formed character at s (caller guarantees validity); sets `len` to its byte length.
char32_t utf8_decode(const char* s, int& len);

// Appends the UTF-8 encoding of `cp` (a valid scalar value).
void utf8_append(std::string& out, char32_t cp);

}  // namespace mk::tok
