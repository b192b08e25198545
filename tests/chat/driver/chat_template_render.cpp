// Test driver for tools/chat_template_cases.py: reads {"cases": [...]} as JSON on stdin, renders each case
// with our chat-template interpreter and prints a JSON array of {"ok": true, "text": ...} or
// {"ok": false, "error": ...}. A case is {"template": source, "bos_token"?, "eos_token"?} plus either
// "context" (rendered as is) or "messages" + "add_generation_prompt" + "extra" (rendered with render_chat).
#include <iostream>
#include <iterator>
#include <map>
#include <string>

#include "megakernel/chat_template.h"

using ojson = nlohmann::ordered_json;

int main() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  ojson request = ojson::parse(input, nullptr, false);
  if (request.is_discarded() || !request.contains("cases") || !request["cases"].is_array()) {
    std::cerr << "chat_template_render: expected {\"cases\": [...]} on stdin\n";
    return 2;
  }
  std::map<std::string, mk::Expected<mk::ChatTemplate>> parsed;
  ojson results = ojson::array();
  for (const auto& c : request["cases"]) {
    const std::string source = c.value("template", "");
    auto it = parsed.find(source);
    if (it == parsed.end()) it = parsed.emplace(source, mk::ChatTemplate::parse(source)).first;
    mk::Expected<std::string> out = it->second.error();
    if (it->second) {
      mk::ChatTemplate t = *it->second;
      auto token = [&](const char* key) -> std::optional<std::string> {
        if (c.contains(key) && c[key].is_string()) return c[key].get<std::string>();
        return std::nullopt;
      };
      t.set_special_tokens(token("bos_token"), token("eos_token"));
      if (c.contains("context")) {
        out = t.render(c["context"]);
      } else {
        out = mk::render_chat(t, c.value("messages", ojson::array()), c.value("add_generation_prompt", false),
                              c.value("extra", ojson()));
      }
    }
    ojson r = ojson::object();
    r["ok"] = out.ok();
    if (out) r["text"] = *out;
    else r["error"] = out.message();
    results.push_back(std::move(r));
  }
  // Invalid UTF-8 in a rendering must not abort the dump: replace it (the comparison then fails visibly).
  std::cout << results.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  return 0;
}
