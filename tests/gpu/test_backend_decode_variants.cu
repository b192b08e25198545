// The CUDA backend's decode variants by sequence length (CudaBackend::DecodeGraph): each runs the attention decode
// with the split count fitted to its longest sequence, and a step picks the variant from its position. Decoding
// across the variants' boundaries must match the CPU reference, and the device loop, the host loop and K steps per
// graph launch must agree bitwise (the same variant serves the same position in each).
// Run: test_gpu --gtest_filter='BackendDecodeVariants*'
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "cuda/attention/attention.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda_backend_fixture.h"
#include "gpu_test_util.h"
#include "megakernel/engine.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::gpu_test {
namespace {

// Llama (llama3 RoPE scaling), head dim 64 as cuda/attention serves it, GQA 2, positions up to 4096.
ModelConfig llama_config() { return megakernel::test::tiny_config(Family::Llama, 4, 2, 64, 128, 256, 2, 640); }

TEST(BackendDecodeVariants, SplitCountFollowsTheSequenceLength) {
  if (!cuda::attention_lib_available()) GTEST_SKIP() << "cuda/attention is not linked";
  Model m = make_random_model(llama_config(), DType::BF16, 3);
  auto gpu = make_layered(m, 4096);
  ASSERT_TRUE(gpu);
  const int cap_splits = cuda::attention_decode_splits(1, 2, 4096);
  ASSERT_GT(cap_splits, 1) << "the whole cache should want several splits (else this test shows nothing)";
  EXPECT_EQ(gpu->decode_attention_splits(1), cuda::attention_decode_splits(1, 2, 256));
  EXPECT_EQ(gpu->decode_attention_splits(256), cuda::attention_decode_splits(1, 2, 256));
  EXPECT_EQ(gpu->decode_attention_splits(4096), cap_splits);
  EXPECT_LT(gpu->decode_attention_splits(200), cap_splits);
}

// Prefill 240 positions, then 40 teacher-forced decode steps across the 256-position variant boundary.
TEST(BackendDecodeVariants, DecodeAcrossVariantsMatchesCpu) {
  const ModelConfig c = llama_config();
  Model m = make_random_model(c, DType::BF16, 4);
  auto gpu = make_layered(m, 4096);
  ASSERT_TRUE(gpu);
  CpuBackend cpu(m, 4096);
  const int V = c.n_vocab;
  std::vector<float> lg(size_t(V), 0.f), lc(size_t(V), 0.f);
  std::vector<int32_t> feed = random_tokens(240, V, 5);
  int pos = 0;
  for (int step = 0; step <= 40; ++step) {
    SCOPED_TRACE(cat("step ", step, " at position ", pos));
    ASSERT_TRUE(gpu->forward(feed, pos, lg).ok());
    ASSERT_TRUE(cpu.forward(feed, pos, lc).ok());
    EXPECT_LT(rel_err(lg, lc), 3e-2);
    const int32_t ac = cpu::argmax(lc.data(), V), ag = cpu::argmax(lg.data(), V);
    const float spread = *std::max_element(lc.begin(), lc.end()) - *std::min_element(lc.begin(), lc.end());
    if (ag != ac) EXPECT_LT(lc[size_t(ac)] - lc[size_t(ag)], 2e-2 * spread) << "GPU picked " << ag << ", CPU " << ac;
    pos += int(feed.size());
    feed = {ac};
  }
}

// Greedy from position 250 for 24 tokens (variant boundary at 256): the device loop with 1 and 6 steps per launch
// and the host loop give the same tokens (6 steps from 250 end at the boundary: every position runs the same
// variant in all three).
TEST(BackendDecodeVariants, DeviceLoopsAcrossVariantsEqualHostLoop) {
  const ModelConfig c = llama_config();
  Model m = make_random_model(c, DType::BF16, 6);
  cuda::CudaBackendOptions one, six;
  one.graph_steps = 1;  // the default is 8: from 250 its first launch would run positions < 256 with the next variant
  six.graph_steps = 6;
  auto a = make_layered(m, 4096, one), b = make_layered(m, 4096), k = make_layered(m, 4096, six);
  ASSERT_TRUE(a && b && k);
  const std::vector<int32_t> prompt = random_tokens(251, c.n_vocab, 7);
  std::vector<float> l(size_t(c.n_vocab), 0.f);
  for (auto* g : {a.get(), b.get(), k.get()}) ASSERT_TRUE(g->forward(std::span(prompt).first(250), 0, l).ok());
  std::vector<int32_t> dev(24, -1), dev_k(24, -2);
  ASSERT_TRUE(a->decode_greedy(prompt[250], 250, dev).ok());
  ASSERT_TRUE(k->decode_greedy(prompt[250], 250, dev_k).ok());
  EXPECT_EQ(dev_k, dev) << "6 steps per graph launch vs 1";
  int32_t tok = prompt[250];
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(b->forward(std::vector<int32_t>{tok}, 250 + i, l).ok());
    tok = cpu::argmax(l.data(), c.n_vocab);
    EXPECT_EQ(dev[size_t(i)], tok) << "token " << i << " (position " << 251 + i << ")";
  }
}

// The engine's greedy requests go through decode_greedy (chunks on the device) and must produce what its per-token
// host loop produces on the same backend (a wrapper that hides decode_greedy forces that loop).
TEST(BackendDecodeVariants, EngineOnDeviceGreedyEqualsHostLoop) {
  struct HostLoop final : Backend {
    Backend& b;
    explicit HostLoop(Backend& inner) : b(inner) {}
    const char* name() const override { return "host-loop"; }
    Status forward(std::span<const int32_t> t, int pos, std::span<float> l) override { return b.forward(t, pos, l); }
    void truncate(int pos) override { b.truncate(pos); }
    int max_context() const override { return b.max_context(); }
    const ModelConfig& config() const override { return b.config(); }
  };
  const ModelConfig c = llama_config();
  Model m = make_random_model(c, DType::BF16, 9);
  auto dev = make_layered(m, 4096), host = make_layered(m, 4096);
  ASSERT_TRUE(dev && host && dev->has_decode_greedy());
  HostLoop host_loop(*host);
  Engine e_dev(*dev), e_host(host_loop);
  GenerateOptions o;
  o.max_new_tokens = 45;  // 1 from the prefill + chunks of 16, 16, 12
  o.ignore_eos = true;
  const std::vector<int32_t> prompt = random_tokens(240, c.n_vocab, 10);  // the decode crosses the 256 variant boundary
  auto a = e_dev.generate(prompt, o), b = e_host.generate(prompt, o);
  ASSERT_TRUE(a && b) << (a ? b.message() : a.message());
  EXPECT_EQ(a->ids, b->ids);
  // A second turn after an EOS inside a chunk: the engine must have uncached the steps past it.
  o.ignore_eos = false;
  o.extra_eos_ids = {a->ids[20]};
  std::vector<int32_t> turn(prompt);
  turn.push_back(5);
  auto a2 = e_dev.generate(turn, o), b2 = e_host.generate(turn, o);
  ASSERT_TRUE(a2 && b2);
  EXPECT_EQ(a2->ids, b2->ids);
  EXPECT_EQ(e_dev.cached_ids(), e_host.cached_ids());
  std::vector<int32_t> turn3(e_dev.cached_ids());
  turn3.insert(turn3.end(), {a2->ids.back(), 11, 12});
  auto a3 = e_dev.generate(turn3, o), b3 = e_host.generate(turn3, o);
  ASSERT_TRUE(a3 && b3);
  EXPECT_EQ(a3->ids, b3->ids) << "third turn reusing the cache left by a stop inside a chunk";
}

}  // namespace
}  // namespace mk::gpu_test
