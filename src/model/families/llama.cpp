// LlamaForCausalLM (Llama 3.0/3.1/3.2): the baseline decoder. head_dim defaults to hidden/heads;
// RoPE may use llama3 frequency scaling (parsed by config.cpp); embeddings may be tied.
#include "model/family.h"

namespace mk {
namespace {

Status apply_llama(const ConfigReader& config, ModelConfig&) {
  MK_TRY(require_silu(config));
  MK_TRY(require_false(config, "attention_bias", "Llama attention projections without biases"));
  MK_TRY(require_false(config, "mlp_bias", "MLP projections without biases"));
  return {};
}

}  // namespace

extern const FamilySpec LLAMA_FAMILY = {"LlamaForCausalLM", "llama", Family::Llama, 2048,
                                        apply_llama};

}  // namespace mk
