// The GPT-2 byte-level alphabet: each byte 0..255 stands for one printable code point (printable Latin-1
// bytes for themselves, the others for U+0100 + n in byte order). Vocabularies of byte-level BPE models are
// written in this alphabet ("Ġ" = U+0120 = the space byte).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace mk::tok {

// The code point byte `b` stands for.
char32_t byte_to_char(uint8_t b);
// UTF-8 of byte_to_char(b) (1 or 2 bytes).
std::string_view byte_to_utf8(uint8_t b);
// The byte code point `c` stands for, or -1 when c is not in the alphabet.
int char_to_byte(char32_t c);

// Maps every byte of `raw` to its alphabet character, appended to `out`.
void byte_level_encode(std::string& out, std::string_view raw);
// The bytes that the alphabet string `s` stands for; false (and `out` unchanged) when a character of `s`
// is not in the alphabet.
bool byte_level_decode(std::string& out, std::string_view s);

}  // namespace mk::tok
