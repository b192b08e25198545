// CpuBackend (see cpu_backend.h).
#include "cpu/cpu_backend.h"

#include <algorithm>

namespace mk {

namespace {
int resolve_max_context(const ModelConfig& config, int max_context) {
  if (max_context > 0) return max_context;
  return config.max_position > 0 ? std::min(config.max_position, 4096) : 4096;
}
}  // namespace

CpuBackend::CpuBackend(const Model& model, int max_context)
    : weights_(model.weights), forward_(model.config, weights_, resolve_max_context(model.config, max_context)) {}

Status CpuBackend::forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) {
  const ModelConfig& c = forward_.config();
  if (tokens.empty()) return make_error("cpu backend: forward called with no tokens");
  if (pos != n_cached_)
    return make_error("cpu backend: forward at position ", pos, " but ", n_cached_,
                      " positions are cached (pos must equal the number of cached tokens)");
  if (int64_t(pos) + int64_t(tokens.size()) > max_context())
    return make_error("cpu backend: ", pos + tokens.size(), " tokens exceed the context length of ",
                      max_context());
  if (logits.size() != size_t(c.n_vocab))
    return make_error("cpu backend: logits buffer holds ", logits.size(), " floats, expected n_vocab = ",
                      c.n_vocab);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
      return make_error("cpu backend: token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ",
                        c.n_vocab, ")");
  for (size_t i = 0; i < tokens.size(); ++i) {
    bool last = i + 1 == tokens.size();
    forward_.step(tokens[i], pos + int(i), last ? logits.data() : nullptr);
    n_cached_ = pos + int(i) + 1;
  }
  return {};
}

void CpuBackend::truncate(int pos) { n_cached_ = std::clamp(pos, 0, n_cached_); }

std::unique_ptr<Backend> make_cpu_backend(const Model& model, int max_context) {
  return std::make_unique<CpuBackend>(model, max_context);
}

}  // namespace mk
