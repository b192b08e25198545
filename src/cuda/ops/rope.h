// After the fused QKV projection: bias add (Qwen2), per-head q/k RMSNorm (Qwen3), RoPE (HF rotate_half, inv_freq
// precomputed on the host by cpu::rope_inv_freq, so default and llama3 scaling are the CPU's bits), then q to
// bf16 for attention and k, v to bf16 straight into the paged KV cache (layout: cuda/attention/attention.h).
// One warp per (token, head). CPU reference: cpu::rmsnorm (per head) + cpu::rope. Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

struct RopeQkvArgs {
  const float* qkv = nullptr;      // [n_tokens, q_dim + 2 * kv_dim] f32: q | k | v of each token
  bool pair_rows = false;          // qkv (and bias) hold each head in rope-pair order (device_weights.h)
  const float* bias = nullptr;     // [q_dim + 2 * kv_dim] or null (Qwen2)
  const float* q_norm = nullptr;   // [head_dim] or null (Qwen3)
  const float* k_norm = nullptr;   // [head_dim] or null (Qwen3)
  float eps = 1e-6f;
  const float* inv_freq = nullptr; // [head_dim / 2]
  const int32_t* pos0 = nullptr;   // device scalar: position of token 0 (token t sits at *pos0 + t)
  int n_tokens = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  bf16* q_out = nullptr;           // [n_tokens, n_head, head_dim] bf16
  KvCacheView kv;                  // K/V rows of position p written to block_table[p / kv_block_size]
  const int32_t* block_table = nullptr;  // [max_blocks] of the one sequence
  int max_positions = 0;           // capacity; rows at positions >= this are not written
};

void rope_qkv(const Stream& s, const RopeQkvArgs& a);

}  // namespace mk::cuda
