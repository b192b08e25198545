// UTF-8 validation and replacement (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal Subparts").
#include "tokenizer/utf8.h"

namespace mk::tok {

namespace {
// Expected total length of a sequence from its lead byte (0: not a lead byte), and the allowed range of
// its second byte (Unicode Table 3-7, well-formed UTF-8 byte sequences).
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}
}  // namespace

int utf8_sequence(const unsigned char* s, size_t n) {
  const Lead lead = lead_info(s[0]);
  if (lead.len == 1) return 1;
  if (lead.len == 0) return -1;
  for (int i = 1; i < lead.len; ++i) {
    if (static_cast<size_t>(i) >= n) return 0;  // cut short by the end of the buffer
    const unsigned char lo = i == 1 ? lead.lo : 0x80, hi = i == 1 ? lead.hi : 0xBF;
    if (s[i] < lo || s[i] > hi) return -i;
  }
  return lead.len;
}

bool utf8_is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int k = utf8_sequence(p + i, n - i);
    if (k <= 0) return false;
    i += static_cast<size_t>(k);
  }
  return true;
}

size_t utf8_append_sanitized(std::string& out, std::string_view s, bool final) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size(), run = 0;  // [run, i): valid bytes not yet copied
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int k = utf8_sequence(p + i, n - i);
    if (k > 0) {
      i += static_cast<size_t>(k);
      continue;
    }
    out.append(s.substr(run, i - run));
    if (k == 0 && !final) return n - i;  // an incomplete character at the end: hold it back
    out.append(REPLACEMENT_UTF8);
    i += k == 0 ? n - i : static_cast<size_t>(-k);
    run = i;
  }
  out.append(s.substr(run, n - run));
  return 0;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  utf8_append_sanitized(out, s, true);
  return out;
}

char32_t utf8_decode(const char* s, int& len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  if (p[0] < 0x80) {
    len = 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    len = 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    len = 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  len = 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace mk::tok
