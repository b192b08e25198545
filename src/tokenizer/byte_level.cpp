// The byte-level alphabet tables (tokenizers' bytes_char(), after GPT-2's bytes_to_unicode()).
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace mk::tok {

namespace {
struct Tables {
  std::array<char32_t, 256> chars{};       // [256] byte -> code point
  std::array<std::string, 256> utf8;       // [256] byte -> UTF-8 of its code point
  std::array<int16_t, 512> bytes{};        // [512] code point (< 512) -> byte, -1 if none

  Tables() {
    bytes.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[b] = printable ? char32_t(b) : char32_t(256 + n++);
      utf8_append(utf8[b], chars[b]);
      bytes[chars[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().chars[b]; }
std::string_view byte_to_utf8(uint8_t b) { return tables().utf8[b]; }

int char_to_byte(char32_t c) { return c < 512 ? tables().bytes[c] : -1; }

void byte_level_encode(std::string& out, std::string_view raw) {
  const Tables& t = tables();
  for (unsigned char b : raw) out.append(t.utf8[b]);
}

bool byte_level_decode(std::string& out, std::string_view s) {
  const size_t start = out.size();
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    const int b = char_to_byte(utf8_decode(s.data() + i, len));
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace mk::tok
