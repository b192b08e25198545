// Weights: named, shaped views into memory-mapped checkpoint files (no copies). Matrices keep the
// Hugging Face layout [out_features, in_features], row-major.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "megakernel/config.h"

namespace mk {

struct TensorView {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;    // e.g. [out, in]
  const void* data = nullptr;    // null when the tensor is absent (optional biases, norms)
  std::string name;              // checkpoint name, for messages

  bool present() const { return data != nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  float at(size_t i) const { return load_f32(data, dtype, i); }
};

struct LayerWeights {
  TensorView attn_norm;                 // [n_embd]
  TensorView wq, wk, wv;                // [q_dim, n_embd], [kv_dim, n_embd], [kv_dim, n_embd]
  TensorView bq, bk, bv;                // [q_dim], [kv_dim], [kv_dim]   (Qwen2 only)
  TensorView q_norm, k_norm;            // [head_dim]                    (Qwen3 only)
  TensorView wo;                        // [n_embd, q_dim]
  TensorView mlp_norm;                  // [n_embd]
  TensorView w_gate, w_up;              // [n_ff, n_embd]
  TensorView w_down;                    // [n_embd, n_ff]
};

struct Weights {
  TensorView tok_embd;                  // [n_vocab, n_embd]
  std::vector<LayerWeights> layers;     // [n_layer]
  TensorView final_norm;                // [n_embd]
  TensorView lm_head;                   // [n_vocab, n_embd]; aliases tok_embd when tied
  std::vector<std::shared_ptr<const void>> storage;  // keeps the mappings (or owned buffers) alive
};

}  // namespace mk
