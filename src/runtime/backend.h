// Backend: runs the model forward over token positions, owning its KV cache. The CPU reference,
// the layered CUDA path and the megakernel all implement it; the engine sees only this.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "megakernel/sampling.h"

namespace mk {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Appends tokens at positions [pos, pos + tokens.size()) to the KV cache and writes the logits of
  // the last token into logits ([n_vocab] floats). pos must equal the number of tokens already cached.
  virtual Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) = 0;
  // Forgets cached positions >= pos (pos = 0: a new sequence).
  virtual void truncate(int pos) = 0;
  virtual int max_context() const = 0;
  virtual const ModelConfig& config() const = 0;

  // Greedy decoding with no host work between tokens, for backends that have it (the GPU ones: the argmax and the
  // next step's input stay on the device). Feeds `token` at `pos` (pos must equal the number of cached tokens), then
  // each argmax back in; out[i] is the i-th argmax (lowest id on ties). The engine uses it for greedy requests
  // without a repetition penalty.
  //   Stop ids checked on the device (the engine's EOS ids): a backend with max_stop_ids() >= stop_ids.size() > 0 ends
  // after the first chosen token that is one of stop_ids. Returns the number n of tokens produced (out[0, n), out[n - 1]
  // the stop id when n < out.size()); pos + n positions are cached (the last token is not fed). More stop ids than
  // max_stop_ids() is an error. Without stop ids (or a backend without device stops: max_stop_ids() == 0, the
  // default) every one of out.size() tokens is produced: callers check for stops themselves either way.
  virtual bool has_decode_greedy() const { return false; }
  virtual int max_stop_ids() const { return 0; }
  virtual Expected<int> decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                            std::span<int32_t> out) {
    (void)token, (void)pos, (void)stop_ids, (void)out;
    return make_error(name(), " backend: no on-device greedy decoding");
  }
  // Sampled decoding on the device, as decode_greedy_until but each next token drawn by the host Sampler's rule
  // (runtime/sampler.h) with draw indices first_draw, first_draw + 1, ...: the tokens a host loop would choose from
  // the same logits. Only for the parameters can_decode_sample accepts (the engine samples on the host otherwise).
  virtual bool can_decode_sample(const SamplingParams& p) const {
    (void)p;
    return false;
  }
  virtual Expected<int> decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                            std::span<const int32_t> stop_ids, std::span<int32_t> out) {
    (void)token, (void)pos, (void)p, (void)first_draw, (void)stop_ids, (void)out;
    return make_error(name(), " backend: no on-device sampling");
  }
  // The same without stop ids: all out.size() tokens.
  Status decode_greedy(int32_t token, int pos, std::span<int32_t> out) {
    auto n = decode_greedy_until(token, pos, {}, out);
    if (!n) return n.error();
    return {};
  }
  Status decode_sample(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw, std::span<int32_t> out) {
    auto n = decode_sample_until(token, pos, p, first_draw, {}, out);
    if (!n) return n.error();
    return {};
  }
  // The next token chosen on the device from the logits of the last forward() or forward_on_device() (no host
  // Sampler over n_vocab logits): the host Sampler's rule with draw index `draw`, as decode_sample_until draws its
  // tokens, for the parameters can_decode_sample accepts; with greedy parameters (no repetition penalty) on a backend
  // with has_decode_greedy(), the argmax (lowest id on ties), as decode_greedy_until chooses. Right after the forward
  // (another call that runs the model replaces those logits). The engine takes a request's first token with it, then
  // decode_*_until continue (a draw from draw + 1).
  virtual Expected<int32_t> sample_last(const SamplingParams& p, uint64_t draw) {
    (void)p, (void)draw;
    return make_error(name(), " backend: no on-device draw from the last logits");
  }
  // forward() without the logits for the host: they stay where sample_last reads them (the GPU backends skip the
  // copy of n_vocab floats and the host's pass over them). The engine's prefill when the first token is chosen on the
  // device. The default runs forward() into a scratch buffer (backends whose sample_last reads host logits).
  virtual Status forward_on_device(std::span<const int32_t> tokens, int pos) {
    std::vector<float> logits(size_t(config().n_vocab));
    return forward(tokens, pos, logits);
  }
};

}  // namespace mk
