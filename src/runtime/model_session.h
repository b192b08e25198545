// ModelSession: what a front end (CLI, server) needs to serve one model folder: the model, its tokenizer
// and chat template when present, and a backend. Every error names the folder or file and what to do.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "megakernel/chat_template.h"
#include "megakernel/model.h"
#include "megakernel/tokenizer.h"
#include "runtime/backend_factory.h"

namespace mk {

struct SessionOptions {
  std::filesystem::path model_dir;
  std::filesystem::path tokenizer_dir;  // empty: model_dir
  bool require_tokenizer = false;       // error when tokenizer.json is missing (else: no tokenizer)
  bool require_chat_template = false;
  std::string tokenizer_hint;           // appended to the missing-tokenizer error (e.g. "or use --prompt-ids")
  LoadOptions load;
};

struct ModelSession {
  std::unique_ptr<Model> model;  // stable address: the backend may keep views into it
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<Backend> backend;  // null until start_backend()
  std::filesystem::path tokenizer_dir;
  // Builds the backend (separate from loading so that the context size can follow the prompt length).
  Status start_backend(const BackendOptions& options);
  // Stop ids: the model's (generation_config.json) plus the tokenizer's eos_token, deduplicated.
  std::vector<int32_t> eos_ids() const;
};

Expected<ModelSession> open_session(const SessionOptions& options);

// Ids of a text prompt: the tokenizer's ids (special-token strings become their ids), with the BOS id
// put first when the tokenizer defines one (tokenizer_config.json bos_token, as Llama 3 does and Qwen
// does not) and add_bos is set, unless the text already starts with it.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool add_bos);

// "1,2,3" (optionally in [ ], spaces allowed) -> ids; errors name the bad item.
Expected<std::vector<int32_t>> parse_id_list(std::string_view text);

}  // namespace mk
