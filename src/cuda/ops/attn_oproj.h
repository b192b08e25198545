// Decode attention fused with the O projection and its residual add, for short contexts: one kernel where the
// layered step otherwise runs the attention kernel and then the O matvec (one kernel boundary and one round of
// latency fewer per layer). Block (g, r) computes the attention of kv head g's q heads over the whole cached
// sequence (every r recomputes it: cheap while the sequence is short), multiplies that output by g's columns of
// W_o for the rows of slice r (weights loaded before the PDL wait), and writes a partial sum; the last block of
// slice r to arrive adds the n_kv_head partials, in group order, to the residual (deterministic).
// Test: tests/gpu/test_ops.cu (AttnOproj*); used by CudaBackend when CudaBackendOptions::fuse_attn_o.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

struct AttnOprojArgs {
  const __nv_bfloat16* q = nullptr;    // [n_head, D], after RoPE
  KvCacheView kv;                      // this layer's paged cache (head_dim D, n_kv_head)
  const int32_t* block_table = nullptr;  // [kv_n_blocks]
  const int32_t* seq_len = nullptr;    // device: cached positions, the newest included
  const __nv_bfloat16* wo = nullptr;   // [n_embd, n_head * D]
  float* x = nullptr;                  // [n_embd] residual: x += W_o attention
  float* partial = nullptr;            // [n_kv_head, n_embd] scratch
  int* counters = nullptr;             // [attn_oproj_slices()] zero before the first call; left zero by each call
  int n_head = 0, n_embd = 0;
  int max_len = 0;  // positions the shared memory holds: *seq_len must not exceed it (<= ATTN_OPROJ_MAX_LEN)
};

constexpr int ATTN_OPROJ_MAX_LEN = 256;  // one position per thread

// Head dim 64 or 128, n_head a multiple of n_kv_head with at most 8 q heads per kv head.
bool attn_oproj_supported(int n_head, int n_kv_head, int head_dim);
// Row slices per kv head (blocks = n_kv_head x slices); the counters buffer needs this many ints.
int attn_oproj_slices(int n_kv_head);
void attn_oproj(const Stream& s, const AttnOprojArgs& a);

}  // namespace mk::cuda
