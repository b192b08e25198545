// Helpers for the chat-template tests: render a template source with a JSON context given as text.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "megakernel/chat_template.h"

namespace mk::testing {

// Rendered text, or "ERROR: <message>" when parsing or rendering fails.
inline std::string render(const std::string& source, const std::string& context_json = "{}") {
  auto t = ChatTemplate::parse(source);
  if (!t) return "ERROR: " + t.message();
  auto out = t->render(nlohmann::ordered_json::parse(context_json));
  if (!out) return "ERROR: " + out.message();
  return *out;
}

// Error message of a template that must fail (empty when it unexpectedly succeeds).
inline std::string error_of(const std::string& source, const std::string& context_json = "{}") {
  std::string r = render(source, context_json);
  return r.rfind("ERROR: ", 0) == 0 ? r.substr(7) : std::string();
}

// tokenizer_config.json of a real model ("llama3", "qwen3"): test data that stays outside this repository (its
// licence), found in $MK_TOKENIZER_DATA/<model>/ or ../shared/data/tokenizers/<model>/ beside the checkout.
inline std::optional<std::filesystem::path> real_tokenizer_config(const std::string& model) {
  const char* env = std::getenv("MK_TOKENIZER_DATA");
  std::filesystem::path base = env ? std::filesystem::path(env)
                                   : std::filesystem::path(MK_SOURCE_DIR) / ".." / "shared" / "data" / "tokenizers";
  std::filesystem::path p = base / model / "tokenizer_config.json";
  if (std::filesystem::exists(p)) return p;
  return std::nullopt;
}

}  // namespace mk::testing
