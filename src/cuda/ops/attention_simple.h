// The simplest correct attention over the paged KV cache (cuda/attention/attention.h layout), for one sequence:
// prefill and decode alike. One warp per (query, head), online softmax over keys in fp32. Slow on purpose; it
// is the fallback and cross-check for the tuned kernels of cuda/attention/.
// CPU reference: cpu::attention. Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

// q, out: [n_tokens, n_head, head_dim] bf16. Query t sits at position *seq_len_k - n_tokens + t and sees
// keys [0, that position]. block_table: [max_blocks] of the sequence. scale 0 means 1/sqrt(head_dim).
void attention_simple(const Stream& s, __nv_bfloat16* out, const __nv_bfloat16* q, const KvCacheView& kv,
                      const int32_t* block_table, const int32_t* seq_len_k, int n_tokens, int n_head, float scale);

}  // namespace mk::cuda
