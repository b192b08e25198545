// Kernel parameters of the megakernel interpreter and the per-block context its ops see.
// Weights are in the layered path's device layout (cuda/backend/device_weights.h) and the KV cache in
// the paged layout of cuda/attention/attention.h (cuda/backend/kv_cache.h), so both paths share them.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "megakernel/isa.h"

namespace mk::megakernel::device {

using bf16 = __nv_bfloat16;

constexpr int THREADS = 512;  // 16 warps per block, one block per SM
constexpr int WARPS = THREADS / 32;

// One layer's weights and KV pools (device pointers).
struct MkLayer {
  const float* attn_norm;  // [n_embd]
  const bf16* wqkv;        // [q_dim + 2 kv_dim, n_embd]  rows of wq, wk, wv
  const float* bqkv;       // [q_dim + 2 kv_dim] or null
  const float* q_norm;     // [head_dim] or null
  const float* k_norm;     // [head_dim] or null
  const bf16* wo;          // [n_embd, q_dim]
  const float* mlp_norm;   // [n_embd]
  const bf16* w_gate_up;   // [2 n_ff, n_embd]  gate row r at 2r, up row r at 2r + 1
  const bf16* w_down;      // [n_embd, n_ff]
  bf16* k_cache;           // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  bf16* v_cache;           // same
};

struct MkParams {
  const Instr* instrs;          // all queues back to back
  const uint32_t* queue_begin;  // [n_sm + 1] offsets into instrs
  const MkLayer* layers;        // [n_layer]
  const bf16* tok_embd;         // [n_vocab, n_embd]
  const bf16* lm_head;          // [n_vocab, n_embd]
  const float* final_norm;      // [n_embd]
  const float* inv_freq;        // [head_dim / 2]
  const int32_t* block_table;   // [kv_n_blocks] positions -> pool blocks
  int kv_block_size;
  float* ws;                    // fp32 workspace, offsets in `L`
  int32_t* tokens;              // [n_steps + 1]: tokens[s] is step s's input
  uint32_t* counters;           // [L.n_counters] monotonic, never reset
  uint32_t* error;              // [4]: code (1 = watchdog), block, instruction, counter
  Layout L;
  float eps;
  uint32_t epoch0;              // epoch of step 0 of this launch
  int pos0;                     // position of step 0
  int n_steps;
  long long watchdog_cycles;    // a wait longer than this is an error, not a hang
  int prefetch_bytes;           // after publishing, prefetch this much of the next instruction's weights
                                // into L2 before waiting (0 = off)
  int smem_x_floats;            // shared memory plan (floats): s_x, then s_aux, then s_red
  int smem_aux_floats;
};

// What an op needs while it runs on one block.
struct Ctx {
  const MkParams& p;
  float* s_x;    // [smem_x_floats]   the op's input vector (normed activations)
  float* s_aux;  // [smem_aux_floats] op scratch
  float* s_red;  // [64] reductions
  int step, pos;
};

}  // namespace mk::megakernel::device
