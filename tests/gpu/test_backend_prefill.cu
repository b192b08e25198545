// The layered prefill's launch modes (CudaBackendOptions::prefill_graphs, prefill_graph_at): a chunk replayed from
// its CUDA graph, captured before or after an eager run, must give the same bits as eager launches (the same kernels
// with the same arguments): the logits of every prefill, and the K/V rows it cached, seen through the decode step
// that follows. Lengths repeat (graph replays at other positions), exceed the graph cache (graphs
// retired and captured again), span several chunks, and include a 1-token last chunk.
// Run: test_gpu --gtest_filter='BackendPrefill*'
#include <cstring>

#include "cuda/backend/cuda_backend.h"
#include "cuda_backend_fixture.h"
#include "gpu_test_util.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::gpu_test {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Prompts of these lengths one after another on each backend (each prefill starts at 0 or continues the cache), then
// one decode step; every backend's logits must equal the reference's bit for bit.
void expect_same_as_eager(const ModelConfig& c, const std::vector<cuda::CudaBackendOptions>& variants) {
  Model m = make_random_model(c, DType::BF16, 11);
  cuda::CudaBackendOptions ref_opt;
  ref_opt.prefill_chunk = 24;
  ref_opt.prefill_graphs = 0;
  auto ref = make_layered(m, 512, ref_opt);
  ASSERT_TRUE(ref);
  std::vector<std::unique_ptr<cuda::CudaBackend>> bs;
  for (auto o : variants) {
    o.prefill_chunk = 24;
    bs.push_back(make_layered(m, 512, o));
    ASSERT_TRUE(bs.back());
  }
  // {tokens, continue the cache (else from position 0)}: 49 = chunks 24 + 24 + 1; 7 three times (replays) at
  // different positions; 5 lengths before 7 comes back (more than a 2-graph cache holds).
  const std::vector<std::pair<int, bool>> calls = {{7, false}, {7, false}, {5, true},  {49, false}, {7, true},
                                                   {2, false}, {3, true},  {13, true}, {31, true},  {7, true},
                                                   {49, false}, {2, false}};
  const int V = c.n_vocab;
  std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
  int pos = 0;
  uint32_t seed = 100;
  for (const auto& [n, cont] : calls) {
    if (!cont) pos = 0;
    SCOPED_TRACE(cat(n, " tokens at position ", pos));
    const std::vector<int32_t> toks = random_tokens(n, V, seed++);
    ref->truncate(pos);
    ASSERT_TRUE(ref->forward(toks, pos, want).ok());
    for (size_t i = 0; i < bs.size(); ++i) {
      SCOPED_TRACE(cat("variant ", i));
      bs[i]->truncate(pos);
      std::fill(got.begin(), got.end(), -7.f);
      ASSERT_TRUE(bs[i]->forward(toks, pos, got).ok());
      EXPECT_TRUE(same_bits(got, want)) << "prefill logits differ from eager launches (rel err " << rel_err(got, want)
                                        << ")";
    }
    pos += n;
  }
  // The cached K/V of every prefill above (the last prompt's positions): one decode step reads them all.
  const std::vector<int32_t> next = random_tokens(1, V, 999);
  ASSERT_TRUE(ref->forward(next, pos, want).ok());
  for (size_t i = 0; i < bs.size(); ++i) {
    std::fill(got.begin(), got.end(), -7.f);
    ASSERT_TRUE(bs[i]->forward(next, pos, got).ok());
    EXPECT_TRUE(same_bits(got, want)) << "variant " << i << ": the decode step after the prefills differs";
  }
}

std::vector<cuda::CudaBackendOptions> launch_variants() {
  std::vector<cuda::CudaBackendOptions> v(3);
  v[0].prefill_graphs = 2;  // graphs captured after a length's first (eager) run; retired past 2, captured again
  v[0].prefill_graph_at = 2;
  v[1].prefill_graphs = 2;  // captured before the first run
  v[1].prefill_graph_at = 1;
  v[2].prefill_graphs = 16;  // the defaults' cache and capture point (7 tokens with logits recurs 5 times)
  return v;
}

TEST(BackendPrefill, GraphsGiveEagerBitsLlama) {
  // Head dim 64 (cuda/attention), GQA 2, 3 layers.
  expect_same_as_eager(megakernel::test::tiny_config(Family::Llama, 4, 2, 64, 256, 512, 3, 640), launch_variants());
}

TEST(BackendPrefill, GraphsGiveEagerBitsQwen3) {
  // q/k norm; head dim 128; tied embeddings.
  expect_same_as_eager(megakernel::test::tiny_config(Family::Qwen3, 4, 2, 128, 256, 384, 2, 500, true),
                       launch_variants());
}

TEST(BackendPrefill, RejectsBadGraphOptions) {
  Model m = make_random_model(megakernel::test::tiny_config(Family::Llama, 4, 2, 64, 128, 256, 1, 300), DType::BF16, 1);
  auto w = cuda::upload_weights(m.config, m.weights, true);
  ASSERT_TRUE(w);
  cuda::CudaBackendOptions o;
  o.prefill_graph_at = 0;
  auto b = cuda::CudaBackend::create(m.config, std::move(*w), 64, o);
  ASSERT_FALSE(b);
  EXPECT_NE(b.message().find("prefill_graph_at"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace mk::gpu_test
