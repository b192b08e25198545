// The reference forward pass of one sequence, one token at a time, over cpu:: ops with an fp32 KV cache.
// Llama / Qwen2 (q/k/v biases) / Qwen3 (per-head q/k RMSNorm before RoPE), GQA, llama3 RoPE scaling,
// tied LM head. Mirrors transformers' LlamaDecoderLayer: h += attn(norm(h)); h += mlp(norm(h)).
// An optional hook sees every named activation, so a mismatch names the first tensor that diverges.
// Tests: tests/cpu/test_forward.cpp, tests/cpu/test_golden.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "megakernel/config.h"
#include "model/weights.h"

namespace mk::cpu {

// Called with each activation as it is produced. layer = -1 outside the layers. Names, in order:
//   "embd"                                                          (layer -1)
//   per layer: "attn_norm", "q", "k", "v" (projections + biases), "q_norm", "k_norm" (Qwen3 only),
//   "q_rope", "k_rope", "attn" (softmax(qk) v, before wo), "attn_out" (wo), "h_attn" (residual after
//   attention), "mlp_norm", "gate", "up", "act" (silu(gate) * up), "mlp_out" (down), "h" (layer output)
//   "final_norm", "logits"                                          (layer -1; logits only when computed)
using ActivationHook =
    std::function<void(std::string_view name, int layer, int pos, std::span<const float> values)>;

// fp32 KV cache of one sequence: k[layer], v[layer]: [max_ctx, n_kv_head, head_dim].
struct KvCache {
  int max_ctx = 0;
  int kv_dim = 0;  // n_kv_head * head_dim
  std::vector<std::vector<float>> k, v;

  KvCache() = default;
  KvCache(int n_layer, int max_ctx, int kv_dim);
  float* k_at(int layer, int pos) { return k[size_t(layer)].data() + size_t(pos) * size_t(kv_dim); }
  float* v_at(int layer, int pos) { return v[size_t(layer)].data() + size_t(pos) * size_t(kv_dim); }
};

class Forward {
 public:
  // The views in `weights` must stay valid while this object lives (copy the Weights to share storage).
  Forward(const ModelConfig& config, const Weights& weights, int max_context);

  // Runs `token` at position `pos`: writes its K and V at pos and attends over [0, pos]. Positions
  // below pos must already be cached. Writes logits[n_vocab] when logits is not null (skipping the
  // LM head saves most of the time of a prefill step).
  void step(int32_t token, int pos, float* logits);

  void set_hook(ActivationHook hook) { hook_ = std::move(hook); }
  const ModelConfig& config() const { return config_; }
  int max_context() const { return kv_.max_ctx; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [head_dim / 2]

 private:
  void attention_block(int layer, int pos);
  void mlp_block(int layer, int pos);
  void emit(std::string_view name, int layer, int pos, const std::vector<float>& v) const;

  ModelConfig config_;
  const Weights& weights_;
  KvCache kv_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  ActivationHook hook_;
  // Scratch of one token.
  std::vector<float> h_;         // [n_embd] residual stream
  std::vector<float> x_;         // [n_embd] normed input of a block
  std::vector<float> q_;         // [n_head, head_dim]
  std::vector<float> k_, v_;     // [n_kv_head, head_dim]
  std::vector<float> attn_;      // [n_head, head_dim]
  std::vector<float> out_;       // [n_embd] block output before the residual add
  std::vector<float> gate_, up_; // [n_ff]
};

}  // namespace mk::cpu
