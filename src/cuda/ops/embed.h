// Embedding gather: out[t, :] = tok_embd[tokens[t], :] (bf16 table -> f32 rows). Tokens outside [0, n_vocab)
// give NaN rows (the host validates tokens before they reach the device; NaN makes a slip visible).
// CPU reference: cpu::embed. Test: tests/gpu/test_ops.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/launch.h"

namespace mk::cuda {

// out: [n_tokens, n_embd] f32; tok_embd: [n_vocab, n_embd] bf16; tokens: [n_tokens] int32 (device).
// reset_argmax, if not null, is set to 0 (the decode step's argmax accumulator; see matvec.h).
void embed(const Stream& s, float* out, const __nv_bfloat16* tok_embd, const int32_t* tokens, int n_tokens,
           int n_embd, int n_vocab, unsigned long long* reset_argmax = nullptr);

}  // namespace mk::cuda
