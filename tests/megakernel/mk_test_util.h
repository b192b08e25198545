// Helpers of the megakernel tests: small model configurations of every family with awkward sizes.
#pragma once
#include "megakernel/config.h"

namespace mk::megakernel::test {

// A small config: hidden size n_embd need not be a power of two, nor n_ff a multiple of 16.
inline ModelConfig tiny_config(Family family, int n_head, int n_kv_head, int head_dim, int n_embd, int n_ff,
                               int n_layer = 2, int n_vocab = 301, bool tied = false) {
  ModelConfig c;
  c.family = family;
  c.architecture = family == Family::Llama ? "LlamaForCausalLM" : family == Family::Qwen2 ? "Qwen2ForCausalLM"
                                                                                         : "Qwen3ForCausalLM";
  c.n_vocab = n_vocab;
  c.n_embd = n_embd;
  c.n_ff = n_ff;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-5f;
  c.max_position = 4096;
  c.tie_word_embeddings = tied;
  c.qkv_bias = family == Family::Qwen2;
  c.qk_norm = family == Family::Qwen3;
  if (family == Family::Llama) {
    c.rope.theta = 500000.f;
    c.rope.type = "llama3";
    c.rope.factor = 32.f;
    c.rope.original_max_position = 64;  // small, so the scaling bands matter at tiny positions
  } else {
    c.rope.theta = 1000000.f;
  }
  return c;
}

}  // namespace mk::megakernel::test
