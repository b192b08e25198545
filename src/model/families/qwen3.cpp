// Qwen3ForCausalLM: Llama layout plus a per-head RMSNorm of q and k (q_norm/k_norm, [head_dim])
// before RoPE. head_dim is explicit (q_dim may differ from hidden_size); transformers' default is 128.
#include "model/family.h"

namespace mk {
namespace {

Status apply_qwen3(const ConfigReader& config, ModelConfig& c) {
  MK_TRY(require_silu(config));
  MK_TRY(require_false(config, "attention_bias", "Qwen3 attention projections without biases"));
  MK_TRY(require_false(config, "use_sliding_window", "full attention in every layer"));
  c.qk_norm = true;
  if (!config.has("head_dim")) c.head_dim = 128;  // Qwen3Config's default
  return {};
}

}  // namespace

extern const FamilySpec QWEN3_FAMILY = {"Qwen3ForCausalLM", "qwen3", Family::Qwen3, 32768,
                                        apply_qwen3};

}  // namespace mk
