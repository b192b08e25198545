// Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama layout plus biases on the q/k/v projections.
#include "model/family.h"

namespace mk {
namespace {

Status apply_qwen2(const ConfigReader& config, ModelConfig& c) {
  MK_TRY(require_silu(config));
  MK_TRY(require_false(config, "use_sliding_window", "full attention in every layer"));
  c.qkv_bias = true;
  return {};
}

}  // namespace

extern const FamilySpec QWEN2_FAMILY = {"Qwen2ForCausalLM", "qwen2", Family::Qwen2, 32768,
                                        apply_qwen2};

}  // namespace mk
