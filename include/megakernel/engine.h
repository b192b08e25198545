// Engine: generates tokens for one sequence on a Backend. prompt ids -> forward (prefill) -> sample ->
// forward (1 token) -> ... until an EOS id, a stop string, or max_new_tokens; greedy requests without a repetition
// penalty decode on the device instead where the backend can (Backend::decode_greedy, 16 tokens per call, every
// stop condition still checked token by token, the steps past a stop uncached). Text is streamed through a
// TextStream (the tokenizer's streaming decoder) with stop strings held back, never half a UTF-8 character.
// The engine remembers which ids the backend's KV cache holds, so a follow-up prompt that extends the
// previous sequence (a chat turn) prefills only the new tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "megakernel/sampling.h"

namespace mk {

class Backend;

// Generated ids -> text, one id at a time (adapts the tokenizer's StreamDecoder; tests use fakes).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t id) = 0;  // text this id completes (may be empty)
  virtual std::string flush() = 0;           // text still pending at the end of the sequence
};

enum class StopReason { MaxTokens, Eos, StopString, Callback };
const char* to_string(StopReason r);

struct GenerateOptions {
  SamplingParams sampling;
  int max_new_tokens = 128;                // new tokens, EOS included
  std::vector<std::string> stop_strings;   // matched on the decoded text; not emitted (needs a TextStream)
  std::vector<int32_t> extra_eos_ids;      // stop ids besides the model's ModelConfig::eos_token_ids
  bool ignore_eos = false;                 // run to max_new_tokens whatever is sampled
};

struct GenerateStats {
  int n_prompt = 0;        // prompt tokens
  int n_reused = 0;        // of them, already in the KV cache (not recomputed)
  int n_generated = 0;     // new tokens (EOS included)
  double prefill_ms = 0;   // prompt forward + first sample: time to first token
  double decode_ms = 0;    // every later forward + sample
  int n_decode_steps() const { return n_generated > 1 ? n_generated - 1 : 0; }
  double decode_ms_per_token() const { return n_decode_steps() ? decode_ms / n_decode_steps() : 0; }
  double decode_tokens_per_s() const { return decode_ms > 0 ? 1e3 * n_decode_steps() / decode_ms : 0; }
  double prefill_tokens_per_s() const { return prefill_ms > 0 ? 1e3 * (n_prompt - n_reused) / prefill_ms : 0; }
};

struct GenerateResult {
  std::vector<int32_t> ids;  // new tokens, in order (an EOS id that stopped generation is the last)
  std::string text;          // emitted text: no EOS text, nothing from a stop string on
  StopReason stop = StopReason::MaxTokens;
  GenerateStats stats;
};

// Called once per new token with the text it released (may be empty: held back, or no TextStream) and
// its id, and once at the end with the remaining text and no ids. Returning false stops generation.
using StreamCallback = std::function<bool(std::string_view text, std::span<const int32_t> ids)>;

class Engine {
 public:
  explicit Engine(Backend& backend) : backend_(backend) {}
  // Errors (with nothing generated): empty prompt, id outside the vocabulary, prompt + max_new_tokens
  // beyond the backend's max context, invalid sampling parameters, stop strings without a TextStream,
  // a backend failure, logits without one finite value.
  Expected<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                    TextStream* text = nullptr, const StreamCallback& on_chunk = {});
  // Forgets the cached sequence: the next generate() prefills from position 0.
  void reset();
  // Ids whose K/V the backend holds, at positions [0, size).
  const std::vector<int32_t>& cached_ids() const { return cached_; }

 private:
  Status prefill(std::span<const int32_t> prompt, GenerateStats& stats, bool on_device);
  Backend& backend_;
  std::vector<int32_t> cached_;
  std::vector<float> logits_;  // [n_vocab]
};

}  // namespace mk
