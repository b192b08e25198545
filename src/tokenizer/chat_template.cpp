// Public chat-template API (include/megakernel/chat_template.h): loading the template and special tokens
// from a model folder, building the context transformers builds in apply_chat_template, rendering.
#include "megakernel/chat_template.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_interp.h"

namespace mk {

using ojson = nlohmann::ordered_json;

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  auto t = jinja::parse_template(source);
  if (!t) return make_error("chat template: ", t.message());
  ChatTemplate out;
  out.impl_ = std::move(*t);
  return out;
}

const std::string& ChatTemplate::source() const {
  static const std::string empty;
  return impl_ ? impl_->source : empty;
}

namespace {
// Nesting depth of a JSON value, computed without recursion (the interpreter recurses over values).
size_t json_depth(const ojson& root) {
  size_t max_depth = 0;
  std::vector<std::pair<const ojson*, size_t>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    max_depth = std::max(max_depth, d);
    if (j->is_structured())
      for (const auto& child : *j) stack.emplace_back(&child, d + 1);
  }
  return max_depth;
}
constexpr size_t MAX_CONTEXT_DEPTH = 256;
}  // namespace

Expected<std::string> ChatTemplate::render(const ojson& context) const {
  if (!impl_) return make_error("chat template: no template was parsed");
  if (!context.is_object() && !context.is_null())
    return make_error("chat template: the render context must be a JSON object, got ", context.type_name());
  if (json_depth(context) > MAX_CONTEXT_DEPTH)
    return make_error("chat template: the render context is nested deeper than ", MAX_CONTEXT_DEPTH, " levels");
  jinja::Scope globals = jinja::default_globals();
  if (context.is_object())
    for (const auto& [key, value] : context.items()) globals.insert_or_assign(key, jinja::from_json(value));
  jinja::Interp interp(*impl_, std::move(globals));
  auto out = interp.run();
  if (!out) return make_error("chat template: ", out.message());
  return out;
}

Expected<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render(ojson::parse(context.dump()));
}

namespace {

Expected<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(path.string(), ": cannot open file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Expected<ojson> read_json(const std::filesystem::path& path) {
  JJ_ASSIGN(std::string text, read_file(path));
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return make_error(path.string(), ": not valid JSON");
  if (!j.is_object()) return make_error(path.string(), ": expected a JSON object at the top level");
  return j;
}

// bos_token / eos_token: a string, {"content": "..."} (AddedToken), null or absent.
Expected<std::optional<std::string>> special_token(const ojson& config, const char* field, const std::string& file) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return std::optional<std::string>(c->get<std::string>());
  }
  return make_error(file, ": '", field, "' must be a string or an object with a string 'content'");
}

// `chat_template`: a string, or a list of {"name", "template"} of which "default" is used.
Expected<std::string> template_source(const ojson& config, const std::string& file) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return make_error(file, ": no 'chat_template' (the model has no chat template)");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string names;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string())
        return make_error(file, ": 'chat_template' list entries must be {\"name\": str, \"template\": str}");
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    return make_error(file, ": 'chat_template' has no entry named 'default' (found: ", names, ")");
  }
  return make_error(file, ": 'chat_template' must be a string or a list of named templates");
}

Expected<ChatTemplate> parse_with_tokens(const std::string& source, const std::string& origin, const ojson* config,
                                         const std::string& config_file) {
  auto t = ChatTemplate::parse(source);
  if (!t) return make_error(origin, ": ", t.message());
  if (config) {
    JJ_ASSIGN(auto bos, special_token(*config, "bos_token", config_file));
    JJ_ASSIGN(auto eos, special_token(*config, "eos_token", config_file));
    t->set_special_tokens(std::move(bos), std::move(eos));
  }
  return t;
}

// transformers' _alias_reasoning_fields: reasoning under any known name is passed as both `thinking`
// (first) and `reasoning_content` (last).
ojson alias_reasoning(const ojson& message) {
  if (!message.is_object()) return message;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = message.find(key);
    if (it == message.end() || it->is_null()) continue;
    ojson r = *it;
    ojson out = ojson::object();
    out["thinking"] = r;
    for (const auto& [k, v] : message.items()) out[k] = v;
    out["reasoning_content"] = r;
    return out;
  }
  return message;
}

}  // namespace

Expected<ChatTemplate> load_chat_template(const std::filesystem::path& tokenizer_config_json) {
  std::string file = tokenizer_config_json.string();
  JJ_ASSIGN(ojson config, read_json(tokenizer_config_json));
  JJ_ASSIGN(std::string source, template_source(config, file));
  return parse_with_tokens(source, file + ": chat_template", &config, file);
}

Expected<ChatTemplate> load_chat_template_from_dir(const std::filesystem::path& model_dir) {
  auto config_path = model_dir / "tokenizer_config.json";
  std::optional<ojson> config;
  if (std::filesystem::exists(config_path)) {
    JJ_ASSIGN(config, read_json(config_path));
  }
  const ojson* cfg = config ? &*config : nullptr;
  auto jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    JJ_ASSIGN(std::string source, read_file(jinja_path));
    return parse_with_tokens(source, jinja_path.string(), cfg, config_path.string());
  }
  auto json_path = model_dir / "chat_template.json";
  if (std::filesystem::exists(json_path)) {
    JJ_ASSIGN(ojson j, read_json(json_path));
    JJ_ASSIGN(std::string source, template_source(j, json_path.string()));
    return parse_with_tokens(source, json_path.string() + ": chat_template", cfg, config_path.string());
  }
  if (!cfg)
    return make_error(model_dir.string(), ": no chat template found (looked for chat_template.jinja, ",
                      "chat_template.json and tokenizer_config.json)");
  JJ_ASSIGN(std::string source, template_source(*cfg, config_path.string()));
  return parse_with_tokens(source, config_path.string() + ": chat_template", cfg, config_path.string());
}

ojson chat_messages_to_json(const std::vector<ChatMessage>& messages) {
  ojson out = ojson::array();
  for (const auto& m : messages) {
    ojson j = ojson::object();
    j["role"] = m.role;
    j["content"] = m.content;
    if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    if (m.extra.is_object())
      for (const auto& [k, v] : m.extra.items()) j[k] = v;
    out.push_back(std::move(j));
  }
  return out;
}

Expected<std::string> render_chat(const ChatTemplate& tmpl, const ojson& messages, bool add_generation_prompt,
                                  const ojson& extra) {
  if (!messages.is_array()) return make_error("chat template: messages must be a JSON array, got ", messages.type_name());
  if (!extra.is_null() && !extra.is_object())
    return make_error("chat template: extra context must be a JSON object, got ", extra.type_name());
  ojson aliased = ojson::array();
  for (const auto& m : messages) {
    if (!m.is_object()) return make_error("chat template: each message must be a JSON object, got ", m.type_name());
    aliased.push_back(alias_reasoning(m));
  }
  ojson ctx = ojson::object();
  ctx["messages"] = std::move(aliased);
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (tmpl.bos_token()) ctx["bos_token"] = *tmpl.bos_token();
  if (tmpl.eos_token()) ctx["eos_token"] = *tmpl.eos_token();
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  return tmpl.render(ctx);
}

Expected<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const ojson& extra) {
  return render_chat(tmpl, chat_messages_to_json(messages), add_generation_prompt, extra);
}

}  // namespace mk
