// Decode attention for the layered path's CUDA graph: one sequence, one query token, paged KV cache
// (cuda/attention/attention.h layout). Split-KV (flash-decoding) with the reduction of the splits folded into the
// same kernel: the last CTA of each kv head to finish (an arrival counter) combines that head group's splits. It
// is launched with programmatic dependent launch and lets the next kernel launch at once, so the O projection
// behind it streams its weights while attention runs (the tuned cuda/attention decode is two plain launches).
// CPU reference: cpu::attention. Test: tests/gpu/test_ops.cu (Ops.DecodeAttention*).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

struct DecodeAttentionArgs {
  __nv_bfloat16* out = nullptr;        // [n_head, head_dim]
  const __nv_bfloat16* q = nullptr;    // [n_head, head_dim]
  KvCacheView kv;                      // head_dim 64 or 128
  const int32_t* block_table = nullptr;  // [max_blocks] of the sequence
  const int32_t* seq_len = nullptr;    // device scalar: cached positions, the current token's included (>= 1)
  int max_positions = 0;               // capacity of the block table (positions); seq_len is clamped to it
  int n_head = 0;                      // multiple of kv.n_kv_head, at most 8 query heads per kv head
  int n_split = 0;                     // from decode_attention_splits (fixed when a graph is captured)
  float scale = 0.f;                   // 0: 1/sqrt(head_dim)
  void* workspace = nullptr;           // decode_attention_workspace_bytes; zeroed once before the first use
};

// Whether decode_attention supports the shape (else use cuda/attention's attention_decode).
bool decode_attention_supported(int n_head, int n_kv_head, int head_dim);
// Splits per kv head for a cache of max_positions on this GPU (about two CTAs per SM at long contexts).
int decode_attention_splits(int n_kv_head, int max_positions);
// Partial outputs [n_head, n_split, head_dim] f32, partial (max, sum) [n_head, n_split, 2], arrival counters.
size_t decode_attention_workspace_bytes(int n_head, int n_kv_head, int head_dim, int n_split);

void decode_attention(const Stream& s, const DecodeAttentionArgs& a);

}  // namespace mk::cuda
