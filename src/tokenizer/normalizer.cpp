// Unicode normalization with utf8proc. ASCII text is already in every normal form, so only the runs that
// hold non-ASCII characters (plus the ASCII starter just before each, which may compose with a following
// mark) go through utf8proc. tokenizers' normalizer has older Unicode tables (normalizer_tables.inc lists the
// characters it does not know): for it such a character is a starter that never changes nor combines, so we
// cut the text at each one and copy it through.
#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <iterator>

#include "tokenizer/utf8.h"

namespace mk::tok {

namespace {
#include "tokenizer/normalizer_tables.inc"

template <size_t N>
bool in_ranges(const char32_t (&ranges)[N][2], char32_t c) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                             [](char32_t v, const char32_t(&r)[2]) { return v < r[0]; });
  return it != std::begin(ranges) && c <= (*std::prev(it))[1];
}

bool unknown_to_tokenizers(char32_t c, NormalForm form) {
  if (c < 0x300) return false;
  const bool compat = form == NormalForm::NFKC || form == NormalForm::NFKD;
  return compat ? in_ranges(MK_TOKENIZERS_UNKNOWN_COMPAT, c) : in_ranges(MK_TOKENIZERS_UNKNOWN_CANONICAL, c);
}

std::string normalize_utf8proc(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (s.empty()) return std::string();
  if (n < 0) return std::string(s);  // cannot happen for well-formed input; keep the text as it is
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// Normalizes a slice, keeping the characters unknown to tokenizers as fixed boundaries.
std::string normalize_slice(std::string_view s, NormalForm form) {
  std::string out;
  size_t piece = 0;  // start of the part not yet normalized
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    const char32_t c = utf8_decode(s.data() + i, len);
    if (unknown_to_tokenizers(c, form)) {
      out += normalize_utf8proc(s.substr(piece, i - piece), form);
      out.append(s.substr(i, static_cast<size_t>(len)));
      piece = i + static_cast<size_t>(len);
    }
    i += static_cast<size_t>(len);
  }
  if (piece == 0) return normalize_utf8proc(s, form);
  out += normalize_utf8proc(s.substr(piece), form);
  return out;
}

Expected<NormalForm> parse_form(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return make_error(where, ": expected an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return NormalForm::NFC;
  if (type == "NFD") return NormalForm::NFD;
  if (type == "NFKC") return NormalForm::NFKC;
  if (type == "NFKD") return NormalForm::NFKD;
  return make_error(where, ".type: unsupported normalizer \"", type,
                    "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
}
}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  std::string out;
  size_t i = 0, copied = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    // A non-ASCII run starts at i; it takes the ASCII character before it as its starter.
    size_t begin = i > copied ? i - 1 : i;
    size_t end = i;
    while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) ++end;
    out.append(s.substr(copied, begin - copied));
    out.append(normalize_slice(s.substr(begin, end - begin), form));
    copied = i = end;
  }
  if (copied == 0) return std::string(s);
  out.append(s.substr(copied));
  return out;
}

Expected<Normalizer> Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (j.is_null()) return n;
  if (j.is_object() && j.value("type", "") == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return make_error(where, ".normalizers: expected an array");
    for (size_t k = 0; k < j["normalizers"].size(); ++k) {
      auto sub = from_json(j["normalizers"][k], cat(where, ".normalizers[", k, "]"));
      if (!sub) return sub.error();
      n.forms_.insert(n.forms_.end(), sub->forms_.begin(), sub->forms_.end());
    }
    return n;
  }
  auto form = parse_form(j, where);
  if (!form) return form.error();
  n.forms_.push_back(*form);
  return n;
}

std::string Normalizer::apply(std::string_view s) const {
  std::string cur(s);
  for (NormalForm f : forms_) cur = normalize(cur, f);
  return cur;
}

}  // namespace mk::tok
