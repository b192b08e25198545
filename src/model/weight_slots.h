// The tensors a model needs: checkpoint name (Hugging Face spelling), expected shape from the
// ModelConfig, and the TensorView it binds to. One list serves the checkpoint binder (weights.cpp),
// the random model (random_model.cpp) and writers of test checkpoints.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace mk {

struct WeightSlot {
  std::string name;             // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // expected, e.g. [q_dim, n_embd]
  TensorView* view;             // where it binds in the Weights
  bool is_norm;                 // RMSNorm weight (random init near 1)
};

// Every tensor of `c` in checkpoint order: embeddings, per layer (norms, attention, MLP), final norm,
// LM head (left out when tie_word_embeddings). Resizes w.layers to n_layer; views point into `w`.
std::vector<WeightSlot> weight_slots(const ModelConfig& c, Weights& w);

// Binds checkpoint tensors to the slots of `c`: every slot must be present with a supported dtype
// (BF16/F16/F32, mixed allowed) and exactly the expected shape. The tied LM head aliases tok_embd.
// `origin` (the model folder) names where tensors were looked for.
Expected<Weights> bind_weights(const ModelConfig& c, const Checkpoint& ck, const std::string& origin);

}  // namespace mk
