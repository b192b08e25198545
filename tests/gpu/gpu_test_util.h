// Helpers for the GPU op tests: device arrays with poisoning, random bf16 data (bits + the floats they decode to),
// TensorViews over host data for the CPU reference ops, and the relative error used by every comparison.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/common/cuda_check.h"
#include "megakernel/config.h"
#include "model/weights.h"

namespace mk::gpu_test {

// A random test model's shape for the backend tests: family, head dim, q / kv heads, tied LM head, vocabulary, and
// the checkpoint dtype of its weights (each test builds its ModelConfig from it).
struct ModelCase {
  Family f;
  int D, n_head, n_kv;
  bool tied;
  int vocab;
  DType dtype;
};

template <class T>
struct DeviceArray {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // All bits set: NaN for f32 and bf16, so an element the kernel did not write fails every comparison.
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }
};

// n ids in [0, V) from seed.
inline std::vector<int32_t> random_tokens(int n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(size_t(n), 0);
  for (auto& x : t) x = int32_t(rng() % uint32_t(V));
  return t;
}

inline std::vector<float> randn(size_t n, std::mt19937& rng, float sigma = 1.f, float mean = 0.f) {
  std::normal_distribution<float> d(mean, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Rounds to bf16: bits for the device, and the same values as floats for the reference.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> f;
};
inline Bf16Data to_bf16(const std::vector<float>& v) {
  Bf16Data d;
  d.bits.resize(v.size());
  d.f.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    d.bits[i] = f32_to_bf16(v[i]);
    d.f[i] = bf16_to_f32(d.bits[i]);
  }
  return d;
}
inline std::vector<float> bf16_bits_to_f32(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

inline TensorView view(const std::vector<float>& v, std::vector<int64_t> shape, const char* name = "t") {
  TensorView t;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.data = v.data();
  t.name = name;
  return t;
}

// [rows, cols] bf16 view of d's bits, for the CPU reference ops.
inline TensorView bf16_view(const Bf16Data& d, int64_t rows, int64_t cols, const char* name = "w") {
  TensorView t;
  t.dtype = DType::BF16;
  t.shape = {rows, cols};
  t.data = d.bits.data();
  t.name = name;
  return t;
}

// ||a - b|| / ||b||, infinite when a holds a NaN (never passes).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace mk::gpu_test
