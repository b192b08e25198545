// Shared by the layered backend's GPU tests: a CudaBackend over a model's weights (uploaded in rope-pair row order,
// as make_cuda_backend does) and random token ids.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "megakernel/model.h"

namespace mk::gpu_test {

// Null (with a test failure) when the upload or the backend fails.
inline std::unique_ptr<cuda::CudaBackend> make_layered(const Model& m, int max_ctx, cuda::CudaBackendOptions opt = {}) {
  auto w = cuda::upload_weights(m.config, m.weights, /*rope_pair_rows=*/true);
  EXPECT_TRUE(w) << w.message();
  if (!w) return nullptr;
  auto b = cuda::CudaBackend::create(m.config, std::move(*w), max_ctx, opt);
  EXPECT_TRUE(b) << b.message();
  return b ? std::move(*b) : nullptr;
}

// n ids in [0, V) from seed.
inline std::vector<int32_t> random_tokens(int n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(size_t(n), 0);
  for (auto& x : t) x = int32_t(rng() % uint32_t(V));
  return t;
}

}  // namespace mk::gpu_test
