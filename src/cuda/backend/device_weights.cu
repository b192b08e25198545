// Weight upload and device-side random weights (see device_weights.h).
#include "cuda/backend/device_weights.h"

#include <cstdio>
#include <cstring>
#include <functional>

#include "cuda/backend/upload_staging.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

constexpr size_t ALIGN = 256;
size_t pad(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

// Walks the layout in a fixed order; `take(bytes)` returns the device address of the next piece.
template <class Take>
void layout(const ModelConfig& c, DeviceWeights& d, Take take) {
  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), V = c.n_vocab, D = c.head_dim;
  d.tok_embd = static_cast<bf16*>(take(V * E * 2));
  d.lm_head = c.tie_word_embeddings ? d.tok_embd : static_cast<bf16*>(take(V * E * 2));
  d.final_norm = static_cast<float*>(take(E * 4));
  d.layers.resize(size_t(c.n_layer));
  for (auto& l : d.layers) {
    l.attn_norm = static_cast<float*>(take(E * 4));
    l.wqkv = static_cast<bf16*>(take((Q + 2 * KV) * E * 2));
    l.bqkv = c.qkv_bias ? static_cast<float*>(take((Q + 2 * KV) * 4)) : nullptr;
    l.q_norm = c.qk_norm ? static_cast<float*>(take(D * 4)) : nullptr;
    l.k_norm = c.qk_norm ? static_cast<float*>(take(D * 4)) : nullptr;
    l.wo = static_cast<bf16*>(take(E * Q * 2));
    l.mlp_norm = static_cast<float*>(take(E * 4));
    l.w_gate_up = static_cast<bf16*>(take(2 * F * E * 2));
    l.w_down = static_cast<bf16*>(take(E * F * 2));
  }
}

Status allocate(const ModelConfig& c, DeviceWeights& d) {
  size_t need = device_weight_bytes(c);
  size_t free_b = 0, total_b = 0;
  MK_TRY(cuda_status(cudaMemGetInfo(&free_b, &total_b), "querying GPU memory"));
  if (need > free_b)
    return make_error("the model's weights need ", need >> 20, " MiB of GPU memory but only ", free_b >> 20,
                      " MiB are free (of ", total_b >> 20, " MiB)");
  MK_TRY(cuda_status(cudaMalloc(&d.arena, need), "allocating GPU memory for the weights"));
  d.bytes = need;
  char* base = static_cast<char*>(d.arena);
  size_t off = 0;
  layout(c, d, [&](size_t n) {
    void* p = base + off;
    off += pad(n);
    return p;
  });
  MK_CHECK(off == need);
  return {};
}

void warn_conversion(const TensorView& t, bool& warned) {
  if (t.dtype == DType::BF16 || warned) return;
  std::fprintf(stderr, "megakernel: warning: converting %s weights to bf16 for the GPU (first: %s)\n",
               std::string(dtype_name(t.dtype)).c_str(), t.name.c_str());
  warned = true;
}

// Host bf16 bits of a tensor: the mapping itself when it is bf16, else a converted copy in `tmp`.
const uint16_t* as_bf16(const TensorView& t, std::vector<uint16_t>& tmp, bool& warned) {
  if (t.dtype == DType::BF16) return static_cast<const uint16_t*>(t.data);
  warn_conversion(t, warned);
  tmp.resize(size_t(t.numel()));
  for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = f32_to_bf16(t.at(i));
  return tmp.data();
}

Status check_shape(const TensorView& t, int64_t rows, int64_t cols) {
  int64_t n = rows * (cols > 0 ? cols : 1);
  if (!t.present() || t.numel() != n)
    return make_error("tensor '", t.name, "' has ", t.present() ? t.numel() : 0, " elements, expected ", rows,
                      cols > 0 ? cat(" x ", cols) : std::string());
  return {};
}

// Source row of destination row r within rope-pair-ordered heads of D rows: 2j <- j, 2j + 1 <- j + D/2.
int64_t paired_source_row(int64_t r, int64_t D) { return r / D * D + (r % D) / 2 + (r % 2) * (D / 2); }

// The pageable path (no staging, or a row larger than a staging buffer): cudaMemcpy2D from the mapping.
Status upload_matrix_pageable(bf16* dst, size_t dst_pitch, const TensorView& src, int64_t rows, int64_t cols,
                              bool& warned) {
  std::vector<uint16_t> tmp;
  const uint16_t* h = as_bf16(src, tmp, warned);
  return cuda_status(cudaMemcpy2D(dst, dst_pitch * 2, h, size_t(cols) * 2, size_t(cols) * 2, size_t(rows),
                                  cudaMemcpyHostToDevice),
                     cat("uploading weights ('", src.name, "')").c_str());
}

Status upload_heads_paired_pageable(bf16* dst, const TensorView& src, int64_t n_heads, int64_t D, int64_t cols,
                                    bool& warned) {
  std::vector<uint16_t> tmp;
  const uint16_t* h = as_bf16(src, tmp, warned);
  const int64_t half = D / 2;
  const size_t row = size_t(cols) * 2;
  for (int64_t hd = 0; hd < n_heads; ++hd)
    for (int64_t part = 0; part < 2; ++part)
      MK_TRY(cuda_status(cudaMemcpy2D(dst + (hd * D + part) * cols, 2 * row, h + (hd * D + part * half) * cols, row, row,
                                      size_t(half), cudaMemcpyHostToDevice),
                         cat("uploading weights ('", src.name, "')").c_str()));
  return {};
}

// Uploads rows x cols of src into dst (destination row pitch dst_pitch elements); with pair_head_dim D, the rows
// of every D-row head in rope-pair order. Through the staging ring when there is one, else pageable copies.
Status upload_matrix(UploadStaging* staging, bf16* dst, size_t dst_pitch, const TensorView& src, int64_t rows,
                     int64_t cols, bool& warned, int64_t pair_head_dim = 0) {
  MK_TRY(check_shape(src, rows, cols));
  const size_t row_bytes = size_t(cols) * 2;
  const int64_t D = pair_head_dim;
  if (!staging || row_bytes > staging->buffer_bytes())
    return D ? upload_heads_paired_pageable(dst, src, rows / D, D, cols, warned)
             : upload_matrix_pageable(dst, dst_pitch, src, rows, cols, warned);
  warn_conversion(src, warned);
  // Runs on several host threads: reads the mapping (or converts), writes destination rows [r0, r1) to `out`.
  auto fill = [&](int64_t r0, int64_t r1, void* out) {
    uint16_t* o = static_cast<uint16_t*>(out);
    if (src.dtype == DType::BF16 && !D) {
      std::memcpy(o, static_cast<const uint16_t*>(src.data) + r0 * cols, size_t(r1 - r0) * row_bytes);
      return;
    }
    for (int64_t r = r0; r < r1; ++r, o += cols) {
      const int64_t s = D ? paired_source_row(r, D) : r;
      if (src.dtype == DType::BF16) {
        std::memcpy(o, static_cast<const uint16_t*>(src.data) + s * cols, row_bytes);
      } else {
        for (int64_t j = 0; j < cols; ++j) o[j] = f32_to_bf16(src.at(size_t(s * cols + j)));
      }
    }
  };
  return staging->upload_rows(dst, dst_pitch * 2, row_bytes, rows, fill, src.name);
}

// Position of element d of a head in rope-pair order.
int64_t paired_index(int64_t d, int64_t D) { return d < D / 2 ? 2 * d : 2 * (d - D / 2) + 1; }

Status upload_vector(float* dst, const TensorView& src, int64_t n, int64_t pair_head_dim = 0) {
  MK_TRY(check_shape(src, n, 0));
  std::vector<float> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = pair_head_dim ? (i / pair_head_dim) * pair_head_dim + paired_index(i % pair_head_dim, pair_head_dim) : i;
    h[size_t(j)] = src.at(size_t(i));
  }
  return cuda_status(cudaMemcpy(dst, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "uploading weights");
}

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

// Uniform in [center - a, center + a].
__global__ void fill_bf16_kernel(bf16* p, size_t n, uint64_t seed, float center, float a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float u = float(hash32(seed * 0x9e3779b97f4a7c15ull + i)) * (1.f / 4294967296.f);
    p[i] = __float2bfloat16(center + a * (2.f * u - 1.f));
  }
}
__global__ void fill_f32_kernel(float* p, size_t n, uint64_t seed, float center, float a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float u = float(hash32(seed * 0x9e3779b97f4a7c15ull + i)) * (1.f / 4294967296.f);
    p[i] = center + a * (2.f * u - 1.f);
  }
}

}  // namespace

DeviceWeights& DeviceWeights::operator=(DeviceWeights&& o) noexcept {
  if (this != &o) {
    if (arena) cudaFree(arena);
    tok_embd = o.tok_embd;
    lm_head = o.lm_head;
    final_norm = o.final_norm;
    layers = std::move(o.layers);
    rope_pair_rows = o.rope_pair_rows;
    arena = o.arena;
    bytes = o.bytes;
    o.arena = nullptr;
    o.bytes = 0;
  }
  return *this;
}

DeviceWeights::~DeviceWeights() {
  if (arena) cudaFree(arena);
}

DeviceWeights DeviceWeights::alias() const {
  DeviceWeights d;
  d.tok_embd = tok_embd;
  d.lm_head = lm_head;
  d.final_norm = final_norm;
  d.layers = layers;
  d.rope_pair_rows = rope_pair_rows;
  d.bytes = bytes;  // arena stays null: the owner frees
  return d;
}

size_t device_weight_bytes(const ModelConfig& c) {
  DeviceWeights d;
  size_t off = 0;
  layout(c, d, [&](size_t n) {
    off += pad(n);
    return static_cast<void*>(nullptr);
  });
  return off;
}

Expected<DeviceWeights> upload_weights(const ModelConfig& c, const Weights& w, bool rope_pair_rows) {
  return upload_weights(c, w, rope_pair_rows, UploadOptions{});
}

Expected<DeviceWeights> upload_weights(const ModelConfig& c, const Weights& w, bool rope_pair_rows,
                                       const UploadOptions& opt) {
  if (int(w.layers.size()) != c.n_layer)
    return make_error("weights have ", w.layers.size(), " layers, config says ", c.n_layer);
  DeviceWeights d;
  MK_TRY(allocate(c, d));
  d.rope_pair_rows = rope_pair_rows;
  // Freed before returning; null (pageable copies) when pinned memory cannot be had.
  std::unique_ptr<UploadStaging> staging = UploadStaging::create(opt.n_staging, opt.staging_bytes);
  UploadStaging* st = staging.get();
  bool warned = false;
  const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), V = c.n_vocab, D = c.head_dim;
  MK_TRY(upload_matrix(st, d.tok_embd, size_t(E), w.tok_embd, V, E, warned));
  if (!c.tie_word_embeddings) {
    const TensorView& head = w.lm_head.present() ? w.lm_head : w.tok_embd;
    MK_TRY(upload_matrix(st, d.lm_head, size_t(E), head, V, E, warned));
  }
  MK_TRY(upload_vector(d.final_norm, w.final_norm, E));
  const int64_t pd = rope_pair_rows ? D : 0;  // rope-pair row order within each head of wqkv and bqkv
  for (int i = 0; i < c.n_layer; ++i) {
    const LayerWeights& s = w.layers[size_t(i)];
    DeviceLayer& l = d.layers[size_t(i)];
    MK_TRY(upload_vector(l.attn_norm, s.attn_norm, E));
    MK_TRY(upload_matrix(st, l.wqkv, size_t(E), s.wq, Q, E, warned, pd));
    MK_TRY(upload_matrix(st, l.wqkv + Q * E, size_t(E), s.wk, KV, E, warned, pd));
    MK_TRY(upload_matrix(st, l.wqkv + (Q + KV) * E, size_t(E), s.wv, KV, E, warned, pd));
    if (l.bqkv) {
      MK_TRY(upload_vector(l.bqkv, s.bq, Q, pd));
      MK_TRY(upload_vector(l.bqkv + Q, s.bk, KV, pd));
      MK_TRY(upload_vector(l.bqkv + Q + KV, s.bv, KV, pd));
    }
    if (l.q_norm) {
      MK_TRY(upload_vector(l.q_norm, s.q_norm, D));
      MK_TRY(upload_vector(l.k_norm, s.k_norm, D));
    }
    MK_TRY(upload_matrix(st, l.wo, size_t(Q), s.wo, E, Q, warned));
    MK_TRY(upload_vector(l.mlp_norm, s.mlp_norm, E));
    // Interleave: gate row r -> row 2r, up row r -> row 2r + 1 (destination pitch two rows).
    MK_TRY(upload_matrix(st, l.w_gate_up, size_t(2 * E), s.w_gate, F, E, warned));
    MK_TRY(upload_matrix(st, l.w_gate_up + E, size_t(2 * E), s.w_up, F, E, warned));
    MK_TRY(upload_matrix(st, l.w_down, size_t(F), s.w_down, E, F, warned));
  }
  if (st) {
    MK_TRY(st->finish());
  }
  MK_TRY(cuda_status(cudaDeviceSynchronize(), "uploading weights"));
  staging.reset();
  return std::move(d);
}

Expected<DeviceWeights> random_device_weights(const ModelConfig& c, uint64_t seed, bool rope_pair_rows) {
  DeviceWeights d;
  MK_TRY(allocate(c, d));
  d.rope_pair_rows = rope_pair_rows;  // random rows: any order is as random as another
  const float a = 0.02f * 1.7320508f;  // uniform with std 0.02
  uint64_t k = seed * 1000003ull;
  auto mat = [&](bf16* p, size_t n) { fill_bf16_kernel<<<1024, 256>>>(p, n, ++k, 0.f, a); };
  auto vec = [&](float* p, size_t n, float center, float amp) { fill_f32_kernel<<<64, 256>>>(p, n, ++k, center, amp); };
  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), V = c.n_vocab, D = c.head_dim;
  mat(d.tok_embd, V * E);
  if (!c.tie_word_embeddings) mat(d.lm_head, V * E);
  vec(d.final_norm, E, 1.f, 0.05f);
  for (auto& l : d.layers) {
    vec(l.attn_norm, E, 1.f, 0.05f);
    mat(l.wqkv, (Q + 2 * KV) * E);
    if (l.bqkv) vec(l.bqkv, Q + 2 * KV, 0.f, a);
    if (l.q_norm) {
      vec(l.q_norm, D, 1.f, 0.05f);
      vec(l.k_norm, D, 1.f, 0.05f);
    }
    mat(l.wo, E * Q);
    vec(l.mlp_norm, E, 1.f, 0.05f);
    mat(l.w_gate_up, 2 * F * E);
    mat(l.w_down, E * F);
  }
  MK_TRY(cuda_status(cudaGetLastError(), "filling random weights"));
  MK_TRY(cuda_status(cudaDeviceSynchronize(), "filling random weights"));
  return std::move(d);
}

}  // namespace mk::cuda
