// ModelConfig: everything a backend needs to know about a model's shapes, read from config.json
// (+ generation_config.json). Backends see this and the weights, nothing of files or text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mk {

enum class Family : uint8_t { Llama, Qwen2, Qwen3 };

// RoPE frequencies. type "default" uses theta only; "llama3" rescales low frequencies
// (transformers' _compute_llama3_parameters).
struct RopeConfig {
  float theta = 10000.f;
  std::string type = "default";  // "default" | "llama3"
  float factor = 1.f;
  float low_freq_factor = 1.f;
  float high_freq_factor = 4.f;
  int original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  Family family = Family::Llama;
  int n_vocab = 0;
  int n_embd = 0;     // hidden_size
  int n_ff = 0;       // intermediate_size
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;   // head_dim, or hidden_size / num_attention_heads
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  int max_position = 0;          // max_position_embeddings
  bool tie_word_embeddings = false;
  bool qkv_bias = false;         // Qwen2: q/k/v projections carry biases
  bool qk_norm = false;          // Qwen3: per-head RMSNorm of q and k before RoPE
  std::vector<int32_t> eos_token_ids;  // from generation_config.json, else config.json
  int32_t bos_token_id = -1;
  std::string torch_dtype;       // config.json "torch_dtype" or "dtype" ("bfloat16", ...); informational

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
};

}  // namespace mk
