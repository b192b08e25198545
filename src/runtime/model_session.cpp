// ModelSession: model + tokenizer + chat template + backend from a model folder (see model_session.h).
#include "runtime/model_session.h"

#include <algorithm>
#include <charconv>

namespace mk {

namespace fs = std::filesystem;

std::vector<int32_t> ModelSession::eos_ids() const {
  std::vector<int32_t> ids = model ? model->config.eos_token_ids : std::vector<int32_t>{};
  if (tokenizer)
    for (int32_t id : tokenizer->eos_ids())
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

Expected<ModelSession> open_session(const SessionOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.model_dir, ec))
    return make_error("model folder ", o.model_dir, " does not exist or is not a folder (--model)");
  ModelSession s;
  s.tokenizer_dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;
  if (fs::exists(s.tokenizer_dir / "tokenizer.json", ec)) {
    auto tok = Tokenizer::load(s.tokenizer_dir);
    if (!tok) return make_error("tokenizer: ", tok.message());
    s.tokenizer = std::move(*tok);
  } else if (o.require_tokenizer || !o.tokenizer_dir.empty()) {
    return make_error("no tokenizer.json in ", s.tokenizer_dir,
                      ": text needs a tokenizer; pass --tokenizer DIR (a folder with tokenizer.json)",
                      o.tokenizer_hint.empty() ? "" : " ", o.tokenizer_hint);
  }
  if (o.require_chat_template) {
    auto tmpl = load_chat_template_from_dir(s.tokenizer_dir);
    if (!tmpl) return make_error("chat template: ", tmpl.message());
    s.chat_template = std::move(*tmpl);
  }
  auto model = load_model(o.model_dir, o.load);
  if (!model) return model.error();
  s.model = std::make_unique<Model>(std::move(*model));
  if (s.tokenizer && s.tokenizer->vocab_size() > s.model->config.n_vocab)
    return make_error("the tokenizer in ", s.tokenizer_dir, " has ", s.tokenizer->vocab_size(),
                      " ids but the model has a vocabulary of ", s.model->config.n_vocab,
                      ": they do not belong together");
  return s;
}

Status ModelSession::start_backend(const BackendOptions& options) {
  MK_CHECK(model);
  auto b = make_backend(*model, options);
  if (!b) return b.error();
  backend = std::move(*b);
  return {};
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool add_bos) {
  std::vector<int32_t> ids = tok.encode(text);
  const auto bos = tok.bos_id();
  if (add_bos && bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

Expected<std::vector<int32_t>> parse_id_list(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
    return s;
  };
  std::string_view body = trim(text);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') body = trim(body.substr(1, body.size() - 2));
  std::vector<int32_t> ids;
  if (body.empty()) return make_error("no token ids in '", text, "': expected comma-separated ids like 1,2,3");
  for (size_t item = 0;; ++item) {
    const size_t comma = body.find(',');
    const std::string_view tok = trim(body.substr(0, comma));
    int32_t v = 0;
    const auto [end, err] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || err != std::errc() || end != tok.data() + tok.size() || v < 0)
      return make_error("item ", item, " ('", tok, "') of '", text,
                        "' is not a token id: expected comma-separated non-negative integers like 1,2,3");
    ids.push_back(v);
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
  }
  return ids;
}

}  // namespace mk
