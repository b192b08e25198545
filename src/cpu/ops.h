// Reference ops of the transformer forward pass: fp32 arithmetic over weights given as TensorView
// (bf16, f16 or f32, upcast element by element). Plain and readable on purpose: every GPU kernel and
// the megakernel simulator are checked against these. A GPU op and its reference share name and
// argument order (cpu::rmsnorm(out, x, w, eps, n) / cuda::rmsnorm(stream, out, x, w, eps, n)).
// Each op mirrors the Hugging Face transformers code path named in its comment.
// Tests: tests/cpu/test_ops.cpp (build/test_cpu).
#pragma once
#include <cstdint>
#include <vector>

#include "megakernel/config.h"
#include "model/weights.h"

namespace mk::cpu {

// out[n_embd] = tok_embd[token, :]   (tok_embd: [n_vocab, n_embd]; aborts when token is out of range)
void embed(float* out, const TensorView& tok_embd, int32_t token);

// out[i] = w[i] * x[i] / sqrt(mean(x^2) + eps), i < n   (LlamaRMSNorm / Qwen3RMSNorm; w: [n]).
// out may alias x.
void rmsnorm(float* out, const float* x, const TensorView& w, float eps, int n);

// out[r] = sum_c w[r, c] * x[c] (+ bias[r])   (w: [rows, cols], x: [cols], out: [rows], bias: [rows]).
// Multi-threaded over rows (core/thread_pool). out must not alias x.
void matvec(float* out, const TensorView& w, const float* x, const TensorView* bias = nullptr);

// The same for rows [row_begin, row_end) only, single-threaded: writes out[row_begin .. row_end)
// (out is the whole [rows] vector, indexed by absolute row). The unit of work of a matrix
// instruction that owns a slice of output rows.
void matvec_rows(float* out, const TensorView& w, const float* x, int64_t row_begin, int64_t row_end,
                 const TensorView* bias = nullptr);

// inv_freq[head_dim / 2]: RoPE inverse frequencies, type "default" or "llama3"
// (transformers' _compute_default_rope_parameters / _compute_llama3_parameters, in fp32).
void rope_inv_freq(std::vector<float>& inv_freq, const RopeConfig& rope, int head_dim);

// Rotates x[n_head, head_dim] in place for position pos, HF rotate_half convention: for i < half,
// (x[i], x[i + half]) -> (x[i] cos - x[i + half] sin, x[i + half] cos + x[i] sin),
// angle = pos * inv_freq[i] (fp32).
void rope(float* x, int n_head, int head_dim, int pos, const float* inv_freq);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(float* out, const float* gate, const float* up, int n);

// Causal attention of one query position over cached positions [0, n_ctx) (the query's own
// position included), grouped-query: query head h reads kv head h / (n_head / n_kv_head).
// q: [n_head, head_dim]; k_cache, v_cache: [>= n_ctx, n_kv_head, head_dim]; out: [n_head, head_dim].
// scores = q.k / sqrt(head_dim), softmax in fp32, out = softmax . v.
void attention(float* out, const float* q, const float* k_cache, const float* v_cache, int n_ctx, int n_head,
               int n_kv_head, int head_dim);

// Index of the largest element, the first one on ties; a NaN counts as the largest (torch.argmax).
int32_t argmax(const float* x, int n);

// out[i] = a[i] + b[i]. out may alias a or b.
void add(float* out, const float* a, const float* b, int n);

}  // namespace mk::cpu
