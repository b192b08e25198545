// Flags shared by `generate` and `chat`: model/tokenizer/device selection and sampling. Values land in the
// structs the runtime takes (SessionOptions, GenerateOptions); sampling ranges are checked by the engine.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "megakernel/engine.h"
#include "runtime/model_session.h"

namespace mk::cli {

struct RunFlags {
  std::string model_dir, tokenizer_dir, device = "cpu", backend;
  int max_context = 0;
  bool verbose = false;
  GenerateOptions gen;
};

inline void add_run_flags(CLI::App* sub, RunFlags& f, int default_n) {
  f.gen.max_new_tokens = default_n;
  sub->add_option("--model", f.model_dir, "Hugging Face model folder (config.json, *.safetensors, ...)")->required();
  sub->add_option("--tokenizer", f.tokenizer_dir, "Folder with tokenizer.json / tokenizer_config.json (default: --model)");
  sub->add_option("-n,--max-new-tokens", f.gen.max_new_tokens, "New tokens to generate at most (EOS included)")
      ->capture_default_str();
  sub->add_option("--temp,--temperature", f.gen.sampling.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  sub->add_option("--top-k", f.gen.sampling.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  sub->add_option("--top-p", f.gen.sampling.top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
  sub->add_option("--min-p", f.gen.sampling.min_p, "Drop tokens below min-p x the top probability; 0 = off")
      ->capture_default_str();
  sub->add_option("--repetition-penalty", f.gen.sampling.repetition_penalty,
                  "Penalise tokens already seen (HF semantics); 1 = off")
      ->capture_default_str();
  sub->add_option("--seed", f.gen.sampling.seed, "Random seed (same seed, same tokens)")->capture_default_str();
  sub->add_option("--stop", f.gen.stop_strings, "Stop when this text appears (not printed); repeatable")
      ->allow_extra_args(false);  // one string per --stop
  sub->add_flag("--ignore-eos", f.gen.ignore_eos, "Do not stop at EOS ids");
  sub->add_option("--device", f.device, "cpu | cuda")->capture_default_str();
  sub->add_option("--backend", f.backend, "Backend kind on the device (cpu: reference; cuda: layered | megakernel)");
  sub->add_option("--max-context", f.max_context, "KV cache positions (default: what the request needs / 4096)");
  sub->add_flag("-v,--verbose", f.verbose, "Timing summary on stderr");
}

inline SessionOptions session_options(const RunFlags& f) {
  SessionOptions o;
  o.model_dir = f.model_dir;
  o.tokenizer_dir = f.tokenizer_dir;
  return o;
}

inline BackendOptions backend_options(const RunFlags& f, int max_context) {
  BackendOptions o;
  o.device = f.device;
  o.kind = f.backend;
  o.max_context = max_context;
  return o;
}

// Prints the engine's timing summary on stderr.
using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// --verbose: where the start-up went, from the command's start: the model folder (tokenizer, template, mapping and
// checking the weights) and the backend (for a GPU: upload, warm-up, graph capture).
inline void print_startup(Clock::time_point t0, Clock::time_point opened, Clock::time_point started,
                          const char* backend_name) {
  std::fprintf(stderr, "[%s] start-up %.0f ms: model folder %.0f ms, backend %.0f ms\n", backend_name,
               ms_between(t0, started), ms_between(t0, opened), ms_between(opened, started));
}

inline void print_stats(const GenerateStats& s, const char* backend_name) {
  std::fprintf(stderr,
               "[%s] prompt %d tokens (%d reused): %.1f ms to first token (%.1f tok/s prefill); "
               "%d new tokens: %.2f ms/token, %.1f tok/s decode\n",
               backend_name, s.n_prompt, s.n_reused, s.prefill_ms, s.prefill_tokens_per_s(), s.n_generated,
               s.decode_ms_per_token(), s.decode_tokens_per_s());
}

}  // namespace mk::cli
