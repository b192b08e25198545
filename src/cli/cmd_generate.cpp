// `megakernel generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [sampling flags] [--ids]`:
// streams the generated text to stdout as it is produced (flushed per piece); with --ids, or when the
// model has no tokenizer, prints the generated ids as one JSON array on the last line instead. Timing
// goes to stderr with --verbose only, so stdout stays clean for scripts. Text output ends with one newline
// added when the generated text does not end with one.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "runtime/backend.h"
#include "runtime/text_stream.h"

namespace mk::cli {

namespace {

struct GenerateFlags {
  RunFlags run;
  std::optional<std::string> prompt, prompt_ids;
  bool ids = false, no_bos = false;
};

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

int fail(const std::string& message) {
  std::fprintf(stderr, "megakernel generate: error: %s\n", message.c_str());
  return 1;
}

int run_generate(const GenerateFlags& f) {
  const auto t0 = Clock::now();
  SessionOptions so = session_options(f.run);
  so.require_tokenizer = f.prompt.has_value();
  so.tokenizer_hint = "or give the prompt as token ids with --prompt-ids";
  auto session = open_session(so);
  if (!session) return fail(session.message());
  ModelSession& s = *session;
  const auto opened = Clock::now();

  std::vector<int32_t> prompt;
  if (f.prompt) {
    prompt = encode_prompt(*s.tokenizer, *f.prompt, !f.no_bos);
  } else {
    auto ids = parse_id_list(*f.prompt_ids);
    if (!ids) return fail("--prompt-ids: " + ids.message());
    prompt = std::move(*ids);
  }
  // Context: what this request needs unless --max-context says otherwise (the engine checks the fit).
  int max_context = f.run.max_context;
  if (max_context <= 0) {
    const int64_t need = int64_t(prompt.size()) + std::max(f.run.gen.max_new_tokens, 0);
    const int max_pos = s.model->config.max_position;
    max_context = int(std::max<int64_t>(1, max_pos > 0 ? std::min<int64_t>(need, max_pos) : need));
  }
  if (Status st = s.start_backend(backend_options(f.run, max_context)); !st) return fail(st.message());
  if (f.run.verbose) print_startup(t0, opened, Clock::now(), s.backend->name());

  const bool print_ids = f.ids || !s.tokenizer;
  std::unique_ptr<TextStream> text;
  if (s.tokenizer) text = std::make_unique<TokenizerTextStream>(*s.tokenizer);
  bool wrote = false, ends_with_newline = false;
  auto on_chunk = [&](std::string_view piece, std::span<const int32_t>) {
    if (!print_ids && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      wrote = true;
      ends_with_newline = piece.back() == '\n';
    }
    return true;
  };
  Engine engine(*s.backend);
  auto r = engine.generate(prompt, f.run.gen, text.get(), on_chunk);
  if (!r) {
    if (wrote) std::fputc('\n', stdout);
    return fail(r.message());
  }
  if (!f.ids && !s.tokenizer)
    std::fprintf(stderr, "megakernel generate: no tokenizer.json in %s: printing token ids (pass --tokenizer DIR for text)\n",
                 s.tokenizer_dir.string().c_str());
  if (print_ids) std::printf("%s\n", ids_json(r->ids).c_str());
  else if (wrote && !ends_with_newline) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (f.run.verbose) {
    print_stats(r->stats, s.backend->name());
    std::fprintf(stderr, "stopped: %s\n", to_string(r->stop));
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  auto f = std::make_shared<GenerateFlags>();
  auto* sub = parent.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
  auto* p = sub->add_option("-p,--prompt", f->prompt, "Prompt text (tokenized with the model's tokenizer; BOS added "
                                                      "when the tokenizer defines one)");
  auto* pi = sub->add_option("--prompt-ids", f->prompt_ids, "Prompt as token ids, e.g. 1,2,3 (no tokenizer needed)");
  p->excludes(pi);
  sub->add_flag("--ids", f->ids, "Print the generated ids as one JSON array instead of text");
  sub->add_flag("--no-bos", f->no_bos, "Do not put the BOS id before a --prompt text");
  add_run_flags(sub, f->run, 128);
  return {sub, [f] {
            if (!f->prompt && !f->prompt_ids) return fail("give the prompt with --prompt TEXT or --prompt-ids 1,2,3");
            return run_generate(*f);
          }};
}

}  // namespace mk::cli
