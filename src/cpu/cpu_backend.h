// CpuBackend: the reference forward pass (cpu/forward.h) behind the Backend interface. Checks every
// argument a caller can get wrong (positions, context length, token ids, logits size) and returns a
// Status naming it.
#pragma once
#include <memory>

#include "cpu/forward.h"
#include "megakernel/model.h"
#include "runtime/backend.h"

namespace mk {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, int max_context);
  const char* name() const override { return "cpu"; }
  Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) override;
  void truncate(int pos) override;
  int max_context() const override { return forward_.max_context(); }
  const ModelConfig& config() const override { return forward_.config(); }

  int n_cached() const { return n_cached_; }
  // Sees every named activation of later forward calls (see cpu::ActivationHook).
  void set_hook(cpu::ActivationHook hook) { forward_.set_hook(std::move(hook)); }

 private:
  Weights weights_;  // a copy of the views; shares (and keeps alive) the model's storage
  cpu::Forward forward_;
  int n_cached_ = 0;
};

// max_context <= 0: the model's max_position (capped at 4096 to bound the fp32 cache).
std::unique_ptr<Backend> make_cpu_backend(const Model& model, int max_context);

}  // namespace mk
