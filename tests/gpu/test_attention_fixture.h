// Test/benchmark fixture for src/cuda/attention: random paged KV caches (blocks scattered over the pool), device
// buffers, poisoning, and the comparison against the float64 reference with FlashAttention-3's rule.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cpu/attention_ref.h"
#include "cuda/attention/attention.h"

namespace mk::attn_test {

#define ATT_CUDA_CHECK(x)                                                                       \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

template <class T>
struct DevBuf {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count = 0) { resize(count); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { cudaFree(ptr); }
  void resize(size_t count) {
    cudaFree(ptr);
    ptr = nullptr;
    n = count;
    if (count) ATT_CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T)));
  }
  void upload(const std::vector<T>& h) {
    resize(h.size());
    ATT_CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    ATT_CUDA_CHECK(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { ATT_CUDA_CHECK(cudaMemset(ptr, 0xff, n * sizeof(T))); }  // bf16 / f32 NaN
};

// Random bf16 values ~ N(0, sigma^2), returned both as raw bits and as the float they decode to.
inline void random_bf16(std::mt19937& rng, size_t n, float sigma, std::vector<uint16_t>& bits, std::vector<float>& f) {
  std::normal_distribution<float> dist(0.f, sigma);
  bits.resize(n);
  f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = f32_to_bf16(dist(rng));
    f[i] = bf16_to_f32(bits[i]);
  }
}

// A paged cache holding `kv_lens` positions per sequence, pool blocks assigned in a random order (plus spare
// blocks that nothing references, filled with large values so that a wrong block index shows).
struct PagedCache {
  int block_size = 64, n_kv_head = 1, head_dim = 64, max_blocks_per_seq = 0, n_blocks = 0;
  std::vector<int32_t> table;         // [batch, max_blocks_per_seq]
  std::vector<uint16_t> k_bits, v_bits;  // [n_blocks, block_size, n_kv_head, head_dim]
  std::vector<float> k, v;
  DevBuf<uint16_t> d_k, d_v;
  DevBuf<int32_t> d_table;

  void build(std::mt19937& rng, const std::vector<int>& kv_lens, int bs, int n_kv, int d, int extra_capacity = 0,
             float sigma = 1.f) {
    block_size = bs;
    n_kv_head = n_kv;
    head_dim = d;
    max_blocks_per_seq = 1;
    int used = 0;
    for (int len : kv_lens) {
      const int nb = (len + extra_capacity + bs - 1) / bs;
      max_blocks_per_seq = std::max(max_blocks_per_seq, nb);
      used += nb;
    }
    n_blocks = used + 3;
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(kv_lens.size() * max_blocks_per_seq, -1);
    int next = 0;
    for (size_t b = 0; b < kv_lens.size(); ++b) {
      const int nb = (kv_lens[b] + extra_capacity + bs - 1) / bs;
      for (int i = 0; i < nb; ++i) table[b * max_blocks_per_seq + i] = perm[next++];
    }
    const size_t n = size_t(n_blocks) * bs * n_kv * d;
    random_bf16(rng, n, sigma, k_bits, k);
    random_bf16(rng, n, sigma, v_bits, v);
    for (int i = next; i < n_blocks; ++i) {  // unreferenced blocks: poison-like large values
      const size_t off = size_t(perm[i]) * bs * n_kv * d;
      for (size_t j = 0; j < size_t(bs) * n_kv * d; ++j) {
        k_bits[off + j] = v_bits[off + j] = f32_to_bf16(1000.f);
        k[off + j] = v[off + j] = 1000.f;
      }
    }
    d_k.upload(k_bits);
    d_v.upload(v_bits);
    d_table.upload(table);
  }
  cuda::KvCacheView view() const {
    cuda::KvCacheView kv;
    kv.k = reinterpret_cast<cuda::bf16*>(d_k.ptr);
    kv.v = reinterpret_cast<cuda::bf16*>(d_v.ptr);
    kv.kv_n_blocks = n_blocks;
    kv.kv_block_size = block_size;
    kv.n_kv_head = n_kv_head;
    kv.head_dim = head_dim;
    return kv;
  }
  cuda::BlockTableView table_view() const { return {d_table.ptr, max_blocks_per_seq}; }
  cpu::PagedKvHost host() const {
    return {k.data(), v.data(), table.data(), max_blocks_per_seq, block_size, n_kv_head, head_dim};
  }
};

// ||a - b|| / ||b|| over doubles; a holds bf16 bits.
inline double rel_err_bf16(const std::vector<uint16_t>& a, const std::vector<double>& b, bool* all_finite) {
  double num = 0, den = 0;
  *all_finite = true;
  for (size_t i = 0; i < b.size(); ++i) {
    const double x = bf16_to_f32(a[i]);
    if (!std::isfinite(x)) *all_finite = false;
    num += (x - b[i]) * (x - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline double rel_err_d(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Decode arguments over `cache`: q and out [batch, n_head, head_dim] bf16, the K/V lengths and the workspace.
inline cuda::AttentionDecodeArgs decode_args(const PagedCache& cache, DevBuf<uint16_t>& q, DevBuf<uint16_t>& out,
                                      DevBuf<int32_t>& lens, DevBuf<float>& ws, int batch, int n_head, int max_k) {
  cuda::AttentionDecodeArgs a;
  a.q = reinterpret_cast<const cuda::bf16*>(q.ptr);
  a.out = reinterpret_cast<cuda::bf16*>(out.ptr);
  a.seq_lens_k = lens.ptr;
  a.kv = cache.view();
  a.block_table = cache.table_view();
  a.batch = batch;
  a.n_head = n_head;
  a.max_seqlen_k = max_k;
  a.workspace = ws.ptr;
  a.workspace_bytes = ws.n * sizeof(float);
  return a;
}

}  // namespace mk::attn_test
