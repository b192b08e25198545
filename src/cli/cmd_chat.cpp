// `megakernel chat --model DIR [sampling flags] [--system TEXT]`: an interactive chat with the model's
// chat template. Reads one user message per stdin line (works with a pipe), streams the reply to stdout,
// keeps the history across turns (the KV cache of the previous turns is reused). Commands: /reset
// (forget the history), /exit (or end of input).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "runtime/backend.h"
#include "runtime/text_stream.h"

namespace mk::cli {

namespace {

struct ChatFlags {
  RunFlags run;
  std::string system;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "megakernel chat: error: %s\n", message.c_str());
  return 1;
}

ChatMessage message(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// One turn: renders the whole history, generates the reply, streams it. Returns the reply text.
Expected<std::string> reply(ModelSession& s, Engine& engine, const std::vector<ChatMessage>& history,
                            const ChatFlags& f, GenerateOptions gen) {
  auto rendered = render_chat(*s.chat_template, history, /*add_generation_prompt=*/true);
  if (!rendered) return make_error("chat template: ", rendered.message());
  const std::vector<int32_t> prompt = s.tokenizer->encode(*rendered);  // the template writes BOS itself
  gen.extra_eos_ids = s.eos_ids();
  TokenizerTextStream text(*s.tokenizer);
  auto r = engine.generate(prompt, gen, &text, [](std::string_view piece, std::span<const int32_t>) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (!r) return r.error();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (f.run.verbose) print_stats(r->stats, s.backend->name());
  return r->text;
}

int run_chat(const ChatFlags& f) {
  const auto t0 = Clock::now();
  SessionOptions so = session_options(f.run);
  so.require_tokenizer = true;
  so.require_chat_template = true;
  auto session = open_session(so);
  if (!session) return fail(session.message());
  ModelSession& s = *session;
  const auto opened = Clock::now();
  int max_context = f.run.max_context;
  if (max_context <= 0) max_context = s.model->config.max_position > 0 ? std::min(s.model->config.max_position, 4096) : 4096;
  if (Status st = s.start_backend(backend_options(f.run, max_context)); !st) return fail(st.message());
  if (f.run.verbose) print_startup(t0, opened, Clock::now(), s.backend->name());

  Engine engine(*s.backend);
  std::vector<ChatMessage> history;
  if (!f.system.empty()) history.push_back(message("system", f.system));
  const size_t n_fixed = history.size();
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) std::fprintf(stderr, "chat with %s (/reset forgets the history, /exit quits)\n", f.run.model_dir.c_str());
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    line = trim(line);
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history.resize(n_fixed);
      engine.reset();
      std::fprintf(stderr, "(history cleared)\n");
      continue;
    }
    history.push_back(message("user", line));
    auto text = reply(s, engine, history, f, f.run.gen);
    if (!text) {
      history.pop_back();  // the turn did not happen; the user can /reset or go on
      std::fprintf(stderr, "megakernel chat: error: %s\n", text.message().c_str());
      if (!interactive) return 1;
      continue;
    }
    history.push_back(message("assistant", *text));
  }
  return 0;
}

}  // namespace

Command add_chat_command(CLI::App& parent) {
  auto f = std::make_shared<ChatFlags>();
  auto* sub = parent.add_subcommand("chat", "Interactive chat with the model's chat template (stdin lines; /reset, /exit)");
  sub->add_option("--system", f->system, "System message put before the conversation");
  add_run_flags(sub, f->run, 512);
  return {sub, [f] { return run_chat(*f); }};
}

}  // namespace mk::cli
