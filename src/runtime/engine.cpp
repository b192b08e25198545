// Engine: the generation loop (see include/megakernel/engine.h). Test: tests/runtime/test_engine.cpp.
#include "megakernel/engine.h"

#include <algorithm>
#include <chrono>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "runtime/stop_scanner.h"

namespace mk {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "stop_string";
    case StopReason::Callback: return "callback";
  }
  return "?";
}

// Tokens per on-device call: the granularity of streaming and of the host's stop checks in that mode.
constexpr int DEVICE_CHUNK = 16;
// With the EOS check on the device (Backend::max_stop_ids) a call ends at an EOS by itself. When in addition nobody
// streams (no callback) and no stop string needs the text, the engine asks for up to this many tokens per call (one
// megakernel launch, its MAX_STEPS): one host round trip per 256 tokens instead of per 16, and no step wasted after an
// EOS. A callback keeps DEVICE_CHUNK: its text then arrives every ~16 tokens (~15 ms at the 1B model's speed on the
// H200), and a stop string or a callback's stop wastes at most 15 steps, as before.
constexpr int DEVICE_CHUNK_UNSTREAMED = 256;

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static Status check_request(const Backend& backend, std::span<const int32_t> prompt,
                            const GenerateOptions& opts, const TextStream* text) {
  MK_TRY(validate(opts.sampling));
  const int n_vocab = backend.config().n_vocab;
  if (prompt.empty()) return make_error("the prompt is empty: at least one token is needed");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= n_vocab)
      return make_error("prompt token ", i, " is ", prompt[i], ": expected an id in [0, ", n_vocab, ")");
  if (opts.max_new_tokens < 0) return make_error("max new tokens is ", opts.max_new_tokens, ": expected >= 0");
  const int64_t need = int64_t(prompt.size()) + opts.max_new_tokens;
  if (need > backend.max_context())
    return make_error("prompt (", prompt.size(), " tokens) + max new tokens (", opts.max_new_tokens, ") = ", need,
                      " exceeds the max context of ", backend.max_context(),
                      " tokens; shorten the prompt, lower -n, or raise --max-context (up to the model's "
                      "max_position_embeddings = ", backend.config().max_position, ")");
  for (const auto& s : opts.stop_strings)
    if (s.empty()) return make_error("a stop string is empty");
  if (!opts.stop_strings.empty() && !text)
    return make_error("stop strings need a tokenizer to decode the text (the model folder has none)");
  return {};
}

// Prefills the prompt, reusing the longest cached prefix (at least one token is recomputed: its logits). on_device:
// the logits stay on the device for Backend::sample_last (logits_ is not written).
Status Engine::prefill(std::span<const int32_t> prompt, GenerateStats& stats, bool on_device) {
  size_t keep = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end()).first - cached_.begin();
  keep = std::min(keep, prompt.size() - 1);
  backend_.truncate(int(keep));
  cached_.resize(keep);
  stats.n_reused = int(keep);
  Status st = on_device ? backend_.forward_on_device(prompt.subspan(keep), int(keep))
                        : backend_.forward(prompt.subspan(keep), int(keep), logits_);
  if (!st) {
    reset();
    return st;
  }
  cached_.assign(prompt.begin(), prompt.end());
  return {};
}

void Engine::reset() {
  backend_.truncate(0);
  cached_.clear();
}

Expected<GenerateResult> Engine::generate(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                          TextStream* text, const StreamCallback& on_chunk) {
  MK_TRY(check_request(backend_, prompt, opts, text));
  GenerateResult res;
  res.stats.n_prompt = int(prompt.size());
  if (opts.max_new_tokens == 0) return res;
  std::vector<int32_t> eos = opts.ignore_eos ? std::vector<int32_t>{} : backend_.config().eos_token_ids;
  if (!opts.ignore_eos) eos.insert(eos.end(), opts.extra_eos_ids.begin(), opts.extra_eos_ids.end());
  std::vector<int32_t> history(prompt.begin(), prompt.end());  // prompt + output: repetition penalty
  Sampler sampler(opts.sampling);
  StopScanner scanner(opts.stop_strings);
  logits_.resize(size_t(backend_.config().n_vocab));
  auto emit = [&](const std::string& piece, std::span<const int32_t> ids) {
    res.text += piece;
    return !on_chunk || on_chunk(piece, ids);
  };

  // Takes one new id: bookkeeping, text, stop conditions, the callback. Returns whether generation stops here.
  auto accept = [&](int32_t id) {
    history.push_back(id);
    res.ids.push_back(id);
    const bool is_eos = std::find(eos.begin(), eos.end(), id) != eos.end();
    const std::string piece = text && !is_eos ? scanner.push(text->push(id)) : std::string();
    bool stop = true;
    if (scanner.stopped()) res.stop = StopReason::StopString;
    else if (is_eos) res.stop = StopReason::Eos;
    else if (int(res.ids.size()) >= opts.max_new_tokens) res.stop = StopReason::MaxTokens;
    else stop = false;
    const int32_t id_arr[1] = {id};
    if (!emit(piece, id_arr) && !stop) {
      res.stop = StopReason::Callback;
      stop = true;
    }
    return stop;
  };
  auto failed = [&](int pos, const Status& st) {
    reset();  // the backend's cache state is unknown after a failure
    return make_error("decode step at position ", pos, ": ", st.message());
  };
  // Greedy without a repetition penalty: the backend's on-device loop, DEVICE_CHUNK tokens per call, when it has
  // one (the same argmax as Sampler's greedy); sampling the same way where the backend draws those parameters
  // itself (Backend::decode_sample: the Sampler's rule and draw indices). The first token of both comes from the
  // prefill's logits on the device (Backend::forward_on_device, sample_last): no copy of n_vocab logits to the host and
  // no host pass over them (H200: a top-k / top-p request's first token 4-14 -> 1.5-1.6 ms, bench/RESULTS.md session
  // 10; greedy's, session 11). Tokens past a stop are
  // dropped and uncached; a backend that checks the EOS ids on the device (max_stop_ids) ends a call at an EOS itself
  // (nothing to drop).
  const bool device_greedy = opts.sampling.argmax_only() && backend_.has_decode_greedy();
  const bool device_sample = !opts.sampling.greedy() && backend_.can_decode_sample(opts.sampling);
  const bool on_device = device_greedy || device_sample;
  // The EOS ids go to the device when the backend checks that many there (else the host's check below is all).
  const bool device_stop = on_device && backend_.max_stop_ids() > 0 && int(eos.size()) <= backend_.max_stop_ids();
  const std::span<const int32_t> device_stops = device_stop ? std::span<const int32_t>(eos) : std::span<const int32_t>();
  const int chunk_max = device_stop && opts.stop_strings.empty() && !on_chunk ? DEVICE_CHUNK_UNSTREAMED : DEVICE_CHUNK;

  auto t0 = std::chrono::steady_clock::now();
  MK_TRY(prefill(prompt, res.stats, on_device));
  int32_t first = -1;
  if (on_device) {  // the prefill's logits stay on the device: the argmax or draw 0 there, as decode_*_until continue
    auto drawn = backend_.sample_last(opts.sampling, sampler.n_draws());
    if (!drawn || *drawn < 0 || *drawn >= backend_.config().n_vocab) {
      reset();  // as after any backend failure: the engine keeps no state it cannot vouch for
      return make_error("drawing the first token on the device at position ", prompt.size(), ": ",
                        drawn ? cat(backend_.name(), " backend drew id ", *drawn, ", expected one in [0, ",
                                    backend_.config().n_vocab, ")")
                              : drawn.message());
    }
    first = *drawn;
    if (device_sample) sampler.advance(1);
  } else {
    first = sampler.sample(logits_, history);
    if (first < 0) return make_error("the backend returned logits without a finite value at position ", cached_.size());
  }
  res.stats.prefill_ms += ms_since(t0);
  bool stop = accept(first);
  std::vector<int32_t> chunk;
  while (!stop) {  // decode steps: feed the last id
    t0 = std::chrono::steady_clock::now();
    const int32_t last = res.ids.back();
    const int pos = int(cached_.size());
    if (on_device) {
      chunk.resize(size_t(std::min(chunk_max, opts.max_new_tokens - int(res.ids.size()))));
      auto n = device_greedy
                   ? backend_.decode_greedy_until(last, pos, device_stops, chunk)
                   : backend_.decode_sample_until(last, pos, opts.sampling, sampler.n_draws(), device_stops, chunk);
      if (!n) return failed(pos, n.error());
      if (*n < 1 || *n > int(chunk.size()))
        return failed(pos, make_error(backend_.name(), " backend produced ", *n, " tokens for a call of ", chunk.size()));
      chunk.resize(size_t(*n));  // fewer when the device stopped at an EOS (it is chunk's last, and it was not fed)
      if (device_sample) sampler.advance(chunk.size());  // the draws the device took
      cached_.push_back(last);
      size_t used = 0;
      while (used < chunk.size() && !stop) {
        if (used > 0) cached_.push_back(chunk[used - 1]);  // fed by the backend before it chose chunk[used]
        stop = accept(chunk[used++]);
      }
      if (used < chunk.size()) backend_.truncate(int(cached_.size()));  // the steps after the stop
    } else {
      if (Status st = backend_.forward({&last, 1}, pos, logits_); !st) return failed(pos, st);
      cached_.push_back(last);
      const int32_t id = sampler.sample(logits_, history);
      if (id < 0) return make_error("the backend returned logits without a finite value at position ", cached_.size());
      stop = accept(id);
    }
    res.stats.decode_ms += ms_since(t0);
  }
  res.stats.n_generated = int(res.ids.size());
  if (text && res.stop != StopReason::StopString) {
    std::string tail = scanner.push(text->flush());
    if (scanner.stopped()) res.stop = StopReason::StopString;
    tail += scanner.finish();
    emit(tail, {});
  }
  return res;
}

}  // namespace mk
