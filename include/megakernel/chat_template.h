// Chat templates: renders the Jinja `chat_template` of a Hugging Face tokenizer with our own small Jinja
// interpreter (src/tokenizer/jinja_*.cpp). It mirrors what transformers does in apply_chat_template:
// jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls, its own
// `tojson` (json.dumps, ensure_ascii=False), `raise_exception`, `strftime_now`, `namespace` and `dict`.
// A construct the interpreter does not support is an error naming it (with line:column), never a silently
// different prompt. Differential test against jinja2: tests/chat/ (tools/chat_template_cases.py).
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mk {

namespace jinja {
struct Template;  // parsed template (AST); defined in src/tokenizer/jinja_ast.h
}

// One chat message. Fields beyond role/content are optional and only passed to the template when set.
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;     // "system" | "user" | "assistant" | "tool" | ...
  std::string content;
  std::optional<std::string> reasoning_content;  // thinking text of an assistant turn (Qwen3 reads it)
  nlohmann::ordered_json tool_calls;             // null, or the OpenAI-style array of tool calls
  nlohmann::ordered_json extra;                  // null, or an object of further fields (name, tool_call_id...)
};

class ChatTemplate {
 public:
  // Parses a Jinja template. Errors name the construct and its line:column.
  static Expected<ChatTemplate> parse(std::string_view source);

  // Renders with `context` as the template's global variables (an object). Objects keep their key order
  // (which `tojson` shows), hence ordered_json; the nlohmann::json overload sorts keys like nlohmann does.
  Expected<std::string> render(const nlohmann::ordered_json& context) const;
  Expected<std::string> render(const nlohmann::json& context) const;

  // Special-token strings from tokenizer_config.json (absent when the file has none or null).
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }
  void set_special_tokens(std::optional<std::string> bos, std::optional<std::string> eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }
  const std::string& source() const;

 private:
  std::shared_ptr<const jinja::Template> impl_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
};

// Reads `chat_template` (a string, or a list of {name, template}: the one named "default" is taken) and
// bos_token / eos_token (strings or {"content": ...} objects) from a tokenizer_config.json.
Expected<ChatTemplate> load_chat_template(const std::filesystem::path& tokenizer_config_json);

// Model folder: chat_template.jinja if present (what transformers 5 writes), else chat_template.json, else
// the tokenizer_config.json of that folder; special tokens always come from tokenizer_config.json.
Expected<ChatTemplate> load_chat_template_from_dir(const std::filesystem::path& model_dir);

// Messages as the JSON array the template sees (reasoning_content also copied to `thinking`, as HF does).
nlohmann::ordered_json chat_messages_to_json(const std::vector<ChatMessage>& messages);

// Builds the context transformers builds — messages, tools (null), documents (null), add_generation_prompt,
// bos_token / eos_token when known — adds every key of `extra` (an object or null; e.g. enable_thinking,
// tools, date_string), and renders.
Expected<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra = nullptr);
// Same with the messages already as a JSON array (e.g. straight from an OpenAI-style request).
Expected<std::string> render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra = nullptr);

}  // namespace mk
