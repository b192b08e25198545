// Normalizers of tokenizer.json that we support: the four Unicode normal forms (via utf8proc) and
// Sequences of them. Input is always well-formed UTF-8 (the tokenizer sanitizes first).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace mk::tok {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

class Normalizer {
 public:
  // From the "normalizer" value of tokenizer.json (null: none). `where` names it in errors.
  static Expected<Normalizer> from_json(const nlohmann::json& j, const std::string& where);

  bool empty() const { return forms_.empty(); }
  // `s` normalized; `s` itself when there is nothing to do.
  std::string apply(std::string_view s) const;

 private:
  std::vector<NormalForm> forms_;  // applied in order
};

// `s` in normal form `form` (utf8proc).
std::string normalize(std::string_view s, NormalForm form);

}  // namespace mk::tok
