// Model weights on the device, uploaded once in bf16, in the layouts the layered kernels want:
//   wqkv       [q_dim + 2 kv_dim, n_embd]  rows of wq, then wk, then wv (one matvec / one GEMM)
//   w_gate_up  [2 n_ff, n_embd]            rows interleaved gate_0, up_0, gate_1, up_1, ... (SwiGLU fused)
//   with rope_pair_rows: within every q, k and v head of wqkv (and bqkv), row 2j holds dim j and row 2j + 1 dim
//   j + head_dim/2, so that one warp's row pair is one RoPE rotation pair (ops/matvec.h, ROPE_QKV); the layered
//   backend asks for it, the megakernel keeps the HF order.
// Norm weights and biases are f32. f32/f16 checkpoints are converted to bf16 at upload (with a warning). The
// matrices go up through pinned staging buffers (upload_staging.h) where pinned memory can be had.
// random_device_weights fills the same layout on the device (for benchmarks of big shapes without host RNG).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "model/weights.h"

namespace mk::cuda {

struct DeviceLayer {
  float* attn_norm = nullptr;       // [n_embd]
  __nv_bfloat16* wqkv = nullptr;    // [q_dim + 2 kv_dim, n_embd]
  float* bqkv = nullptr;            // [q_dim + 2 kv_dim] or null (Qwen2)
  float* q_norm = nullptr;          // [head_dim] or null (Qwen3)
  float* k_norm = nullptr;          // [head_dim] or null (Qwen3)
  __nv_bfloat16* wo = nullptr;      // [n_embd, q_dim]
  float* mlp_norm = nullptr;        // [n_embd]
  __nv_bfloat16* w_gate_up = nullptr;  // [2 n_ff, n_embd] interleaved
  __nv_bfloat16* w_down = nullptr;  // [n_embd, n_ff]
};

struct DeviceWeights {
  __nv_bfloat16* tok_embd = nullptr;  // [n_vocab, n_embd]
  __nv_bfloat16* lm_head = nullptr;   // [n_vocab, n_embd]; == tok_embd when tied
  float* final_norm = nullptr;        // [n_embd]
  std::vector<DeviceLayer> layers;    // [n_layer]
  bool rope_pair_rows = false;        // q/k/v rows of each head in rope-pair order (see above)
  void* arena = nullptr;              // one allocation holding everything above
  size_t bytes = 0;

  DeviceWeights() = default;
  DeviceWeights(DeviceWeights&& o) noexcept { *this = std::move(o); }
  DeviceWeights& operator=(DeviceWeights&& o) noexcept;
  DeviceWeights(const DeviceWeights&) = delete;
  ~DeviceWeights();
  // The same device pointers without ownership (frees nothing): a second backend over these weights.
  DeviceWeights alias() const;
};

// Bytes of device memory the weights of this configuration take (bf16 matrices, f32 vectors, padding).
size_t device_weight_bytes(const ModelConfig& c);

// How the matrices go up: through n_staging pinned buffers of staging_bytes (upload_staging.h), the host link's
// full rate; n_staging = 0, or pinned memory that cannot be had, or a row longer than a buffer: pageable copies
// straight from the mapping (~8.5 GB/s on the H200 machine).
struct UploadOptions {
  int n_staging = 4;
  size_t staging_bytes = size_t(16) << 20;
};

// Uploads (and converts) the weights. Fails before allocating when they do not fit in free device memory.
Expected<DeviceWeights> upload_weights(const ModelConfig& c, const Weights& w, bool rope_pair_rows = false);
Expected<DeviceWeights> upload_weights(const ModelConfig& c, const Weights& w, bool rope_pair_rows,
                                       const UploadOptions& opt);

// Random weights of the configuration, generated on the device: matrices ~ U(-a, a) with std 0.02, norm weights
// 1 +- small, biases small. Deterministic in seed.
Expected<DeviceWeights> random_device_weights(const ModelConfig& c, uint64_t seed, bool rope_pair_rows = false);

}  // namespace mk::cuda
