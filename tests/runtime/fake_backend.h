// Test doubles for the engine: a deterministic Backend whose next token is a function of the cached
// sequence (so KV-cache reuse mistakes change the output), and TextStreams mapping ids to fixed strings.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "megakernel/engine.h"
#include "runtime/backend.h"
#include "runtime/sampler.h"

namespace mk::testing {

// A deterministic "model" for the fake: next token = (sum of the sequence * 7 + length) mod n, so it depends on
// every cached id.
inline int32_t hash_next(const std::vector<int32_t>& s, int n) {
  int64_t h = 0;
  for (int32_t x : s) h = h * 7 + x;
  return int32_t(((h + int64_t(s.size())) % n + n) % n);
}

class FakeBackend final : public Backend {
 public:
  // next(seq): the token the model "predicts" after seq; its logit is 10, every other one is 0.
  FakeBackend(int n_vocab, int max_context, std::function<int32_t(const std::vector<int32_t>&)> next)
      : max_context_(max_context), next_(std::move(next)) {
    config_.n_vocab = n_vocab;
    config_.max_position = max_context;
  }
  const char* name() const override { return "fake"; }
  Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) override {
    ++n_forward;
    forward_sizes.push_back(int(tokens.size()));
    forward_positions.push_back(pos);
    if (pos != int(seq.size())) return make_error("fake: pos ", pos, " but ", seq.size(), " cached");
    if (pos + int(tokens.size()) > max_context_) return make_error("fake: context overflow");
    if (int(logits.size()) != config_.n_vocab) return make_error("fake: logits size");
    if (fail_at_pos >= 0 && pos + int(tokens.size()) > fail_at_pos) return make_error("fake: injected failure");
    seq.insert(seq.end(), tokens.begin(), tokens.end());
    std::fill(logits.begin(), logits.end(), 0.f);
    if (nan_logits) std::fill(logits.begin(), logits.end(), NAN);
    else logits[size_t(next_(seq))] = 10.f;
    last_logits.assign(logits.begin(), logits.end());
    return {};
  }
  // The engine's prefill when the first token is chosen "on the device": the logits stay here (last_logits).
  Status forward_on_device(std::span<const int32_t> tokens, int pos) override {
    ++n_forward_on_device;
    std::vector<float> logits(size_t(config_.n_vocab));
    return forward(tokens, pos, logits);
  }
  void truncate(int pos) override {
    if (pos < int(seq.size())) seq.resize(size_t(pos));
  }
  int max_context() const override { return max_context_; }
  const ModelConfig& config() const override { return config_; }
  // On-device greedy decoding (off unless device_greedy): feeds token, out[0], ..., out[n-2] through forward.
  bool has_decode_greedy() const override { return device_greedy; }
  // On-device sampling (off unless device_sample): temperature only, each token drawn by a Sampler from draw
  // first_draw on, as the CUDA backend's finish kernel does.
  bool can_decode_sample(const SamplingParams& p) const override {
    return device_sample && !p.greedy() && p.top_k == 0 && p.top_p >= 1.f && p.min_p == 0.f &&
           p.repetition_penalty == 1.f;
  }
  // The choice from the last forward's logits: with device_greedy the argmax (greedy parameters), with device_sample a
  // Sampler at draw `draw`, as decode_sample draws. fail_sample_last: an injected failure.
  Expected<int32_t> sample_last(const SamplingParams& p, uint64_t draw) override {
    const bool greedy = device_greedy && p.argmax_only();
    if (!greedy && !can_decode_sample(p)) return Backend::sample_last(p, draw);
    ++n_sample_last;
    if (fail_sample_last) return make_error("fake: injected sample_last failure");
    if (last_logits.empty()) return make_error("fake: sample_last before any forward");
    if (greedy) return int32_t(std::max_element(last_logits.begin(), last_logits.end()) - last_logits.begin());
    Sampler sampler(p);
    sampler.advance(draw);
    std::vector<float> logits = last_logits;
    const int32_t id = sampler.sample(logits, {});
    if (id < 0) return make_error("fake: no finite logit to draw from");
    return id;
  }

  // Stop ids on the device (off unless device_stop): the _until variants end after the first stop id chosen, which is
  // not fed. decode_sizes: out.size() of every _until call; produced: what each returned.
  int max_stop_ids() const override { return device_stop ? 16 : 0; }
  Expected<int> decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                    std::span<int32_t> out) override {
    decode_sizes.push_back(int(out.size()));
    if (!device_greedy) return Backend::decode_greedy_until(token, pos, stop_ids, out);
    ++n_decode_greedy;
    return until(token, pos, stop_ids, out, [&](std::vector<float>& logits, size_t) {
      return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    });
  }
  Expected<int> decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                    std::span<const int32_t> stop_ids, std::span<int32_t> out) override {
    decode_sizes.push_back(int(out.size()));
    if (!can_decode_sample(p)) return Backend::decode_sample_until(token, pos, p, first_draw, stop_ids, out);
    ++n_decode_sample;
    Sampler sampler(p);
    sampler.advance(first_draw);
    return until(token, pos, stop_ids, out, [&](std::vector<float>& logits, size_t) { return sampler.sample(logits, {}); });
  }
  template <class Choose>
  Expected<int> until(int32_t token, int pos, std::span<const int32_t> stop_ids, std::span<int32_t> out, Choose&& choose) {
    if (int(stop_ids.size()) > max_stop_ids()) return make_error("fake: too many stop ids");
    std::vector<float> logits(size_t(config_.n_vocab));
    int n = 0;
    while (n < int(out.size())) {
      MK_TRY(forward({&token, 1}, pos + n, logits));
      out[size_t(n)] = token = choose(logits, size_t(n));
      ++n;
      if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) break;
    }
    produced.push_back(n);
    return n;
  }

  ModelConfig config_;
  std::vector<int32_t> seq;  // what the "KV cache" holds
  int n_forward = 0;
  std::vector<int> forward_sizes, forward_positions;
  int fail_at_pos = -1;
  bool nan_logits = false;
  bool device_greedy = false;
  int n_decode_greedy = 0;
  bool device_sample = false;
  int n_decode_sample = 0;
  int n_sample_last = 0;
  int n_forward_on_device = 0;
  bool fail_sample_last = false;
  std::vector<float> last_logits;  // [n_vocab] of the last forward
  bool device_stop = false;
  std::vector<int> decode_sizes, produced;

 private:
  int max_context_;
  std::function<int32_t(const std::vector<int32_t>&)> next_;
};

// id -> the bytes it stands for (may be part of a UTF-8 character, like byte-level BPE tokens).
class MapTextStream final : public TextStream {
 public:
  explicit MapTextStream(std::map<int32_t, std::string> pieces) : pieces_(std::move(pieces)) {}
  std::string push(int32_t id) override { return pieces_.count(id) ? pieces_.at(id) : "<" + std::to_string(id) + ">"; }
  std::string flush() override { return {}; }

 private:
  std::map<int32_t, std::string> pieces_;
};

}  // namespace mk::testing
