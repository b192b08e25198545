// Matrix-vector product for batch-1 decode: y = W x with W bf16 [n_rows, n_cols] (row-major, HF layout), x f32
// or bf16, fp32 accumulation. Bandwidth-bound: each lane streams 16-byte weight loads, 16 in flight, and the
// first batch of weights is loaded before waiting on the producer of x (programmatic dependent launch), so
// weight traffic overlaps the previous kernel's tail.
// Fusions (all optional): RMSNorm of x folded into the load of x (norm_w), bias, residual add into out,
// SwiGLU of interleaved (gate, up) row pairs, argmax over the outputs (LM head), and for the QKV projection RoPE +
// bf16 q + the K/V cache write (rows in rope-pair order, see device_weights.h), optionally after Qwen3's per-head
// q/k RMSNorm (ROPE_QKV_NORM).
// Kernels: matvec.cu (default, split-K: a warp owns a row pair x a column slice, its loads issued into registers
// before the wait) and matvec_rowpair.cu (the first version; MK_MATVEC=rowpair, and rows too wide for split-K).
// CPU reference: cpu::matvec (+ cpu::rmsnorm, cpu::swiglu, cpu::add, cpu::argmax, cpu::rope). Test:
// tests/gpu/test_ops_matvec.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/common/launch.h"

namespace mk::cuda {

using bf16 = __nv_bfloat16;

enum class MatvecOut : uint8_t {
  STORE,     // out[r] = y[r]
  ADD,       // out[r] += y[r]            (residual add)
  SWIGLU,    // out[i] = silu(y[2i]) * y[2i+1], out: [n_rows / 2]  (rows interleaved gate, up)
  ROPE_QKV,  // y = q | k | v with each head's rows in rope-pair order (row 2j = dim j, 2j+1 = dim j + D/2):
             // RoPE on q and k, q -> rope.q_out (bf16), k and v -> the KV cache at position *rope.pos
  ROPE_QKV_NORM,  // ROPE_QKV with the per-head RMSNorm of q and k (rope.q_norm, rope.k_norm; Qwen3) between the bias
                  // and RoPE. Split-K kernel only: launched in clusters that each own one head, whose blocks add
                  // up the head's sum of squares through distributed shared memory.
};

// Where ROPE_QKV mode puts its results.
struct MatvecRope {
  const float* inv_freq = nullptr;       // [head_dim / 2]
  const int32_t* pos = nullptr;          // device scalar: the token's position
  int head_dim = 0, n_head = 0, n_kv_head = 0;
  __nv_bfloat16* q_out = nullptr;        // [n_head, head_dim]
  KvCacheView kv;
  const int32_t* block_table = nullptr;  // [max_blocks] of the sequence
  int max_positions = 0;                 // positions >= this are not written
  // ROPE_QKV_NORM only: RMSNorm weights of a q head and of a k head, in HF dim order; eps of that norm.
  const float* q_norm = nullptr;         // [head_dim]
  const float* k_norm = nullptr;         // [head_dim]
  float eps = 1e-6f;
};

struct MatvecArgs {
  const bf16* w = nullptr;      // [n_rows, n_cols], 16-byte aligned
  int n_rows = 0;               // any; even for SWIGLU
  int n_cols = 0;               // multiple of 8
  const float* x = nullptr;     // [n_cols]  (exactly one of x, x_bf16)
  const bf16* x_bf16 = nullptr; // [n_cols]
  const float* norm_w = nullptr;  // [n_cols] or null: x is replaced by rmsnorm(x) * norm_w
  float eps = 1e-6f;
  const float* bias = nullptr;  // [n_rows] or null
  float* out = nullptr;         // see MatvecOut
  bf16* out_bf16 = nullptr;     // SWIGLU only, optional: the outputs in bf16 here instead of `out`
  MatvecOut mode = MatvecOut::STORE;
  // Argmax over y (STORE mode only): atomicMax of argmax_pack(y, r) into *argmax; the caller resets it to 0.
  unsigned long long* argmax = nullptr;
  MatvecRope rope;  // ROPE_QKV and ROPE_QKV_NORM modes only
  // ADD mode, split-K kernel: read the first rows of `out` before the PDL wait. Only when the kernel launched just
  // before this one does not write `out` and calls launch_dependents after its own PDL wait (then every earlier
  // writer of `out` has finished before this kernel starts). Bitwise the same results.
  bool add_early = false;
  // Split-K kernel (the others ignore it and trigger after their wait): let the next kernel launch right after this
  // one's weight loads are issued, before its PDL wait, so the next kernel's blocks take free SM slots and start
  // their own weight loads while this one still waits. Only when the next kernel reads nothing before its own wait
  // that a kernel still running may write (weights and norm weights are safe; MatvecArgs::add_early's rows or the
  // decode attention's early K/V are not, unless the kernel before this one triggers after its wait).
  bool trigger_at_start = false;
  // Benchmarks, split-K kernel only: thread 0 of block b writes trace[4b .. 4b + 3] = its SM, then globaltimer (ns)
  // at its start, once x is staged (after the PDL wait) and at its end (bench_probe.h, the matvec timeline).
  unsigned long long* trace = nullptr;
};

void matvec(const Stream& s, const MatvecArgs& a);

// Which kernel matvec() uses: "splitk" (default) or "rowpair"; environment MK_MATVEC (read once) or
// set_matvec_kernel (tests, benchmarks; takes effect for launches enqueued afterwards). Shapes a kernel does not
// support fall back: rowpair -> splitk for the ROPE_QKV modes, splitk -> rowpair for rows too wide for split-K.
const char* matvec_kernel_name();
void set_matvec_kernel(const char* name);  // a name above; anything else: the default
// The split-K kernel's group loop (matvec.cu two_waits): -1 the measured choice per launch (default; environment
// MK_MATVEC_TWO_WAITS, read once), 0 always one wait per group, 1 always two. Same bits either way (tests).
void set_matvec_loop_form(int form);
// matvec() calls so far in `mode`, over the process (tests: which decode path a backend enqueued).
unsigned long long matvec_launch_count(MatvecOut mode);

#ifdef __CUDACC__
#define MK_HOST_DEVICE __host__ __device__
#else
#define MK_HOST_DEVICE
#endif

// Decodes a packed argmax word (see matvec.cu): the row index.
MK_HOST_DEVICE inline int32_t argmax_unpack(unsigned long long packed) { return int32_t(0xffffffffu - uint32_t(packed & 0xffffffffu)); }

}  // namespace mk::cuda
