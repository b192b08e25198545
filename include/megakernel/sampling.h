// Sampling parameters: how the next token is chosen from the logits. The semantics follow Hugging Face
// transformers' `generate` (same processors, same order); the random numbers come from a counter-based
// generator (Philox4x32-10) so that a GPU sampler can reproduce a CPU run draw for draw.
#pragma once
#include <cstdint>

namespace mk {

struct SamplingParams {
  // 0 = greedy (argmax, lowest id on ties). Otherwise logits are divided by it before sampling.
  float temperature = 0.f;
  // Keep only the k largest logits (ties with the k-th are kept too); 0 = off.
  int top_k = 0;
  // Keep the smallest set of most likely tokens whose probability sums to >= top_p; 1 = off.
  float top_p = 1.f;
  // Drop tokens whose probability is < min_p * (probability of the most likely token); 0 = off.
  float min_p = 0.f;
  // For each distinct token already in prompt or output: positive logit / r, negative logit * r; 1 = off.
  float repetition_penalty = 1.f;
  // Same seed, same logits -> same tokens.
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.f || top_k == 1; }
  // Greedy over the raw logits (no repetition penalty to apply first): the token is their argmax, which a device
  // loop or a forward's fused argmax can choose without the host.
  bool argmax_only() const { return greedy() && repetition_penalty == 1.f; }
};

// Checks the ranges above; returns an empty string when valid, else a message naming the parameter.
inline const char* sampling_params_error(const SamplingParams& p) {
  if (!(p.temperature >= 0.f)) return "temperature must be >= 0 (0 = greedy)";
  if (p.top_k < 0) return "top_k must be >= 0 (0 = off)";
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return "top_p must be in (0, 1] (1 = off)";
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return "min_p must be in [0, 1] (0 = off)";
  if (!(p.repetition_penalty > 0.f)) return "repetition_penalty must be > 0 (1 = off)";
  return "";
}

}  // namespace mk
