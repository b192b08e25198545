// Backend factory tests: the built-in CPU backend on a random model, the CUDA error when no CUDA
// backend is registered, unknown devices/kinds, registration of a new kind, and the warm-up of GPU backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fake_backend.h"
#include "megakernel/model.h"
#include "runtime/backend_factory.h"

namespace mk {
namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.n_vocab = 37;
  c.n_embd = 16;
  c.n_ff = 24;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 8;
  c.max_position = 64;
  return c;
}

TEST(BackendFactory, CpuIsTheDefaultAndRunsAForward) {
  const Model m = make_random_model(tiny_config(), DType::F32, 3);
  BackendOptions o;
  o.max_context = 16;
  auto be = make_backend(m, o);
  ASSERT_TRUE(be) << be.message();
  EXPECT_EQ(std::string((*be)->name()), "cpu");
  EXPECT_EQ((*be)->max_context(), 16);
  std::vector<float> logits(37, NAN);
  const std::vector<int32_t> ids{1, 2, 3};
  ASSERT_TRUE((*be)->forward(ids, 0, logits).ok());
  for (float x : logits) EXPECT_TRUE(std::isfinite(x));
}

TEST(BackendFactory, ClearErrorsForCudaUnknownDeviceAndKind) {
  const Model m = make_random_model(tiny_config(), DType::F32, 3);
  BackendOptions o;
  o.device = "tpu";
  auto r = make_backend(m, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("unknown device 'tpu'"), std::string::npos);
  o.device = "cpu";
  o.kind = "warp-drive";
  r = make_backend(m, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("available: reference"), std::string::npos) << r.message();
  o = {};
  o.device = "cuda";
  r = make_backend(m, o);
  bool cuda_registered = false;
  for (const auto& name : registered_backends()) cuda_registered |= name.rfind("cuda/", 0) == 0;
  if (!cuda_registered) {
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("CUDA backend not built/available"), std::string::npos) << r.message();
  }
}

TEST(BackendFactory, RegisteredFactoriesArePicked) {
  register_backend("cpu", "fake-test", [](const Model& m, const BackendOptions& o) -> Expected<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(
        std::make_unique<testing::FakeBackend>(m.config.n_vocab, o.max_context, [](const auto&) { return 0; }));
  });
  const Model m = make_random_model(tiny_config(), DType::F32, 3);
  BackendOptions o;
  o.kind = "fake-test";
  o.max_context = 9;
  auto be = make_backend(m, o);
  ASSERT_TRUE(be) << be.message();
  EXPECT_EQ(std::string((*be)->name()), "fake");
  o.kind = "";  // the first registered kind stays the default
  be = make_backend(m, o);
  ASSERT_TRUE(be);
  EXPECT_EQ(std::string((*be)->name()), "cpu");
  const auto names = registered_backends();
  EXPECT_EQ(names.front(), "cpu/reference");
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu/fake-test"), names.end());
}

// make_backend warms a "cuda" backend up (a 2-token prefill, a decode step, on-device greedy steps) and hands it
// over with an empty cache; a failing warm-up is an error naming the backend. A fake stands in for the GPU.
TEST(BackendFactory, GpuBackendsAreWarmedUpAndStartEmpty) {
  static testing::FakeBackend* made = nullptr;
  static bool fail = false;
  register_backend("cuda", "fake-warm", [](const Model& m, const BackendOptions& o) -> Expected<std::unique_ptr<Backend>> {
    auto b = std::make_unique<testing::FakeBackend>(m.config.n_vocab, o.max_context, [](const auto&) { return 1; });
    b->device_greedy = true;
    if (fail) b->fail_at_pos = 1;
    made = b.get();
    return std::unique_ptr<Backend>(std::move(b));
  });
  const Model m = make_random_model(tiny_config(), DType::F32, 3);
  BackendOptions o;
  o.device = "cuda";
  o.kind = "fake-warm";
  o.max_context = 16;
  auto be = make_backend(m, o);
  ASSERT_TRUE(be) << be.message();
  EXPECT_EQ(made->forward_sizes, (std::vector<int>{2, 1, 1, 1}));
  EXPECT_EQ(made->forward_positions, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(made->n_decode_greedy, 1);
  EXPECT_TRUE(made->seq.empty()) << "the warm-up's positions must be uncached";
  fail = true;
  be = make_backend(m, o);
  ASSERT_FALSE(be);
  EXPECT_NE(be.message().find("warming up the fake backend"), std::string::npos) << be.message();
  fail = false;
}

}  // namespace
}  // namespace mk
