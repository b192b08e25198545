// GPU megakernel tests' shared constructor: a MegakernelBackend of a model whose prompts run through the megakernel
// itself, one launch per token (the backend's default sends prompts of more than one token to the layered prefill:
// tests/gpu/test_megakernel_prefill.cu covers that), so a test compares one code path for both loops.
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "cuda/backend/device_weights.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/model.h"

namespace mk::megakernel {

inline std::unique_ptr<MegakernelBackend> make_mk(const Model& m, int max_ctx, MegakernelOptions opt) {
  opt.layered_prefill = false;
  auto w = cuda::upload_weights(m.config, m.weights);
  EXPECT_TRUE(w) << w.message();
  if (!w) return nullptr;
  auto b = MegakernelBackend::create(m.config, std::move(*w), max_ctx, opt);
  EXPECT_TRUE(b) << b.message();
  return b ? std::move(*b) : nullptr;
}

}  // namespace mk::megakernel
