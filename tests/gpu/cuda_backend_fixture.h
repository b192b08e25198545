// Shared by the layered backend's GPU tests: a CudaBackend over a model's weights (uploaded in rope-pair row order,
// as make_cuda_backend does).
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "cuda/backend/cuda_backend.h"
#include "gpu_test_util.h"
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

}  // namespace mk::gpu_test
