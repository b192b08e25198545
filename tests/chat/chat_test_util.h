// Helpers for the chat-template tests: render a template source with a JSON context given as text.
#pragma once
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

}  // namespace mk::testing
