// Float64 reference of the paged attention in src/cuda/attention/attention.h (same layout, same names), used to
// judge the GPU kernels: attention_prefill covers prefill, chunked prefill and decode (q_len = 1).
// Precision::NAIVE_BF16 emulates a naive attention run in bf16 (scores, probabilities and output rounded to
// bf16, sums in fp32) so that tests can apply FlashAttention-3's rule: GPU error <= ~2x the naive run's error.
#pragma once
#include <cstdint>

namespace mk::cpu {

// Host mirror of the device paged cache (values already decoded from bf16 to float).
struct PagedKvHost {
  const float* k = nullptr;            // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  const float* v = nullptr;            // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  const int32_t* block_table = nullptr;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int kv_block_size = 0;
  int n_kv_head = 0;
  int head_dim = 0;
};

enum class RefPrecision { F64, NAIVE_BF16 };

// out: [total_q, n_head, head_dim]; lse: [total_q, n_head] (natural log, may be null); q: [total_q, n_head,
// head_dim]; cu_seqlens_q: [batch + 1]; seq_lens_k: [batch]. Queries are the last q_len positions of their
// sequence; causal masking is bottom-right aligned (query i sees keys <= kv_len - q_len + i).
void attention_prefill(double* out, double* lse, const float* q, const int32_t* cu_seqlens_q,
                       const int32_t* seq_lens_k, const PagedKvHost& kv, int batch, int n_head, float scale,
                       bool causal, RefPrecision precision = RefPrecision::F64);

}  // namespace mk::cpu
