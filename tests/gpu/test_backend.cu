// The CUDA backend (src/cuda/backend/) against the CPU backend: random small models of every family (Llama, Qwen2
// biases, Qwen3 q/k norm, tied and untied heads, GQA, head dims 32/64/128, odd vocabularies, f32 checkpoints) and
// the golden models of tests/golden/. Greedy decoding is teacher-forced with the CPU's tokens so that one near-tie
// cannot derail the rest; the GPU's argmax must equal the CPU's unless the CPU's two logits are within TIE of each
// other. Logits: relative error < 3e-2 (bf16 K/V cache, bf16 q and attention output; fp32 elsewhere).
// Run: test_gpu --gtest_filter='Backend*'
#include <filesystem>
#include <set>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/ops/matvec.h"
#include "gpu_test_util.h"
#include "megakernel/model.h"
#include "runtime/sampler.h"
#include "sampling_loop.h"

namespace mk::gpu_test {
namespace {

namespace fs = std::filesystem;
constexpr double LOGITS_TOL = 3e-2;

ModelConfig small_config(Family f, int D, int n_head, int n_kv, bool tied, int vocab) {
  ModelConfig c;
  c.family = f;
  c.architecture = f == Family::Llama ? "LlamaForCausalLM" : f == Family::Qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
  c.n_vocab = vocab;
  c.n_embd = 128;
  c.n_ff = 344;
  c.n_layer = 2;
  c.n_head = n_head;
  c.n_kv_head = n_kv;
  c.head_dim = D;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = f == Family::Llama ? 500000.f : 1000000.f;
  if (f == Family::Llama) {
    c.rope.type = "llama3";
    c.rope.factor = 32.f;
  }
  c.max_position = 4096;
  c.tie_word_embeddings = tied;
  c.qkv_bias = f == Family::Qwen2;
  c.qk_norm = f == Family::Qwen3;
  return c;
}

// rope_pair_rows: RoPE fused into the QKV matvec (rope-pair row order; make_cuda_backend's default).
std::unique_ptr<cuda::CudaBackend> make_gpu(const Model& m, int max_ctx, cuda::CudaBackendOptions opt = {},
                                            bool rope_pair_rows = false) {
  auto w = cuda::upload_weights(m.config, m.weights, rope_pair_rows);
  EXPECT_TRUE(w) << w.message();
  if (!w) return nullptr;
  auto b = cuda::CudaBackend::create(m.config, std::move(*w), max_ctx, opt);
  EXPECT_TRUE(b) << b.message();
  return b ? std::move(*b) : nullptr;
}

// Prefill `prompt`, then n_decode teacher-forced decode steps; compares every step's logits and argmax.
void compare_with_cpu(const Model& m, const std::vector<int32_t>& prompt, int n_decode, cuda::CudaBackendOptions opt = {},
                      bool rope_pair_rows = false) {
  const int V = m.config.n_vocab;
  auto gpu = make_gpu(m, 256, opt, rope_pair_rows);
  ASSERT_TRUE(gpu);
  CpuBackend cpu(m, 256);
  std::vector<float> lg(static_cast<size_t>(V)), lc(static_cast<size_t>(V));
  int pos = 0;
  std::vector<int32_t> feed = prompt;
  for (int step = 0; step <= n_decode; ++step) {
    SCOPED_TRACE(cat("step ", step, " at position ", pos, " (", feed.size(), " tokens)"));
    ASSERT_TRUE(gpu->forward(feed, pos, lg).ok());
    ASSERT_TRUE(cpu.forward(feed, pos, lc).ok());
    double err = rel_err(lg, lc);
    EXPECT_LT(err, LOGITS_TOL) << "logits rel err " << err;
    int32_t ag = cpu::argmax(lg.data(), V), ac = cpu::argmax(lc.data(), V);
    float spread = *std::max_element(lc.begin(), lc.end()) - *std::min_element(lc.begin(), lc.end());
    if (ag != ac) EXPECT_LT(lc[size_t(ac)] - lc[size_t(ag)], 2e-2 * spread) << "GPU picked " << ag << ", CPU " << ac;
    pos += int(feed.size());
    feed = {ac};
  }
}

// Runs f (which builds backends of c and decodes) and checks which QKV epilogue their decode steps took: `fused`,
// the QKV matvec's RoPE epilogue at least once per layer (ROPE_QKV_NORM for Qwen3's q/k norm, else ROPE_QKV); else
// neither (the RoPE kernel, or RoPE in the decode attention).
template <class F>
void expect_qkv_path(const ModelConfig& c, bool fused, F&& f) {
  using cuda::MatvecOut;
  const unsigned long long rope0 = cuda::matvec_launch_count(MatvecOut::ROPE_QKV);
  const unsigned long long norm0 = cuda::matvec_launch_count(MatvecOut::ROPE_QKV_NORM);
  f();
  const unsigned long long rope = cuda::matvec_launch_count(MatvecOut::ROPE_QKV) - rope0;
  const unsigned long long norm = cuda::matvec_launch_count(MatvecOut::ROPE_QKV_NORM) - norm0;
  if (fused) {
    EXPECT_GE(c.qk_norm ? norm : rope, unsigned(c.n_layer)) << "the fused QKV epilogue was not used";
    EXPECT_EQ(c.qk_norm ? rope : norm, 0u) << "the other fused mode was used";
  } else {
    EXPECT_EQ(rope + norm, 0u) << "a fused QKV epilogue was used";
  }
}

TEST(Backend, RandomModelsMatchCpu) {
  for (const ModelCase& c : {ModelCase{Family::Llama, 64, 4, 2, true, 1001, DType::BF16},
                             ModelCase{Family::Llama, 32, 4, 4, false, 512, DType::BF16},
                             ModelCase{Family::Qwen2, 64, 6, 2, false, 999, DType::BF16},
                             ModelCase{Family::Qwen3, 128, 4, 1, true, 768, DType::BF16},
                             ModelCase{Family::Qwen3, 64, 8, 2, false, 640, DType::BF16},
                             ModelCase{Family::Llama, 64, 2, 1, false, 300, DType::F32}}) {
    ModelConfig cfg = small_config(c.f, c.D, c.n_head, c.n_kv, c.tied, c.vocab);
    SCOPED_TRACE(cat(cfg.architecture, " D ", c.D, " heads ", c.n_head, "/", c.n_kv, c.tied ? " tied" : "", " vocab ",
                     c.vocab, " ", dtype_name(c.dtype)));
    Model m = make_random_model(cfg, c.dtype, 11 + c.D + c.vocab);
    expect_qkv_path(cfg, false, [&] { compare_with_cpu(m, random_tokens(19, c.vocab, 3), 12); });
    // RoPE in the decode attention needs the attention library's head dims (else the QKV epilogue serves).
    const bool lib = c.D == 64 || c.D == 128;
    {  // rope-pair rows: RoPE fused into the QKV matvec; Qwen3 (q/k norm): RoPE in the decode attention
      SCOPED_TRACE("rope_pair_rows = true");
      expect_qkv_path(cfg, !cfg.qk_norm || !lib,
                      [&] { compare_with_cpu(m, random_tokens(19, c.vocab, 3), 12, {}, true); });
    }
    {  // the other side of CudaBackendOptions::rope_in_attention: off for Qwen3 (ROPE_QKV_NORM), on for the others
      SCOPED_TRACE("rope_in_attention flipped");
      cuda::CudaBackendOptions opt;
      opt.rope_in_attention = cfg.qk_norm ? 0 : 1;
      expect_qkv_path(cfg, cfg.qk_norm || !lib,
                      [&] { compare_with_cpu(m, random_tokens(19, c.vocab, 3), 12, opt, true); });
    }
    {  // the early reads before the PDL waits off (residual rows in O / down, K/V in decode attention)
      SCOPED_TRACE("late residual reads + late K/V");
      cuda::CudaBackendOptions opt;
      opt.add_early = false;
      opt.attn_early_kv = false;
      compare_with_cpu(m, random_tokens(19, c.vocab, 3), 12, opt, true);
    }
  }
}

TEST(Backend, PrefillChunksGraphAndPdlDoNotChangeResults) {
  Model m = make_random_model(small_config(Family::Llama, 64, 4, 2, false, 1000), DType::BF16, 5);
  auto prompt = random_tokens(150, 1000, 9);
  // Graph + PDL (default), no graph, no PDL, early triggers: the same kernels, so the same bits.
  std::vector<std::vector<float>> outs;
  for (auto [graph, pdl, chunk, early] : {std::tuple{true, true, 1024, false}, {false, true, 1024, false},
                                          {true, false, 1024, false}, {true, true, 64, false}, {true, true, 1024, true}}) {
    cuda::CudaBackendOptions opt;
    opt.graph = graph;
    opt.pdl = pdl;
    opt.prefill_chunk = chunk;
    opt.early_trigger = early;
    auto gpu = make_gpu(m, 256, opt);
    ASSERT_TRUE(gpu);
    std::vector<float> l(1000);
    ASSERT_TRUE(gpu->forward(prompt, 0, l).ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(gpu->forward(std::vector<int32_t>{int32_t(i * 7)}, 150 + i, l).ok());
    outs.push_back(l);
  }
  EXPECT_EQ(outs[0], outs[1]) << "graph vs eager";
  EXPECT_EQ(outs[0], outs[2]) << "PDL vs none";
  // Chunks of 64 queries run the SIMPLE attention kernel, one chunk of 150 the HOPPER one (AttentionOptions::
  // simple_max_q): bf16 rounding apart (measured 1.04e-3), far inside the CPU comparison's LOGITS_TOL.
  EXPECT_LT(rel_err(outs[3], outs[0]), 1e-2) << "chunked prefill";
  EXPECT_EQ(outs[0], outs[4]) << "early triggers vs triggers after the waits";
}

TEST(Backend, DeviceGreedyLoopEqualsHostLoop) {
  Model m = make_random_model(small_config(Family::Qwen3, 64, 4, 2, true, 777), DType::BF16, 8);
  auto prompt = random_tokens(10, 777, 1);
  cuda::CudaBackendOptions three;
  three.graph_steps = 3;  // 20 tokens = 6 launches of 3 steps + 2 single steps
  three.add_early = false;  // residual rows read after the PDL wait (default: before): the same bits
  three.early_trigger = false;  // every kernel triggers the next after its wait (default: QKV, O, down at start)
  auto a = make_gpu(m, 128), b = make_gpu(m, 128), k = make_gpu(m, 128, three);
  ASSERT_TRUE(a && b && k);
  std::vector<float> l(777);
  ASSERT_TRUE(a->forward(std::span(prompt).first(9), 0, l).ok());
  ASSERT_TRUE(b->forward(std::span(prompt).first(9), 0, l).ok());
  ASSERT_TRUE(k->forward(std::span(prompt).first(9), 0, l).ok());
  std::vector<int32_t> dev(20), dev_k(20, -1);
  ASSERT_TRUE(a->decode_greedy(prompt[9], 9, dev).ok());
  ASSERT_TRUE(k->decode_greedy(prompt[9], 9, dev_k).ok());
  EXPECT_EQ(dev_k, dev) << "3 steps per graph launch + late residual reads + late triggers vs the defaults";
  int32_t tok = prompt[9];
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b->forward(std::vector<int32_t>{tok}, 9 + i, l).ok());
    tok = cpu::argmax(l.data(), 777);
    EXPECT_EQ(dev[size_t(i)], tok) << "token " << i;
  }
}

// Sampled decode on the device (temperature + min-p drawn by the finish kernel) gives the host loop's tokens: forward
// on the same backend, then the host Sampler with the same seed and draw indices; with 1 and 8 steps per launch.
TEST(Backend, DeviceSamplingLoopEqualsHostLoop) {
  const int V = 777;
  Model m = make_random_model(small_config(Family::Llama, 64, 4, 2, false, V), DType::BF16, 12);
  auto prompt = random_tokens(10, V, 4);
  for (float min_p : {0.f, 0.02f}) {
    SCOPED_TRACE(cat("min_p ", min_p));
    SamplingParams p;
    p.temperature = 1.5f;  // random weights give flat logits: the draws spread over many ids
    p.min_p = min_p;
    p.seed = 2024;
    cuda::CudaBackendOptions one, single;
    one.graph_steps = 1;
    single.sample_blocks = 1;  // block_sample (the default draws over 64 blocks: grid_sample)
    auto a = make_gpu(m, 128), k = make_gpu(m, 128, one), gs = make_gpu(m, 128, single), b = make_gpu(m, 128);
    ASSERT_TRUE(a && k && gs && b);
    ASSERT_TRUE(a->can_decode_sample(p));
    std::vector<float> l(size_t(V), 0.f);
    for (auto* g : {a.get(), k.get(), gs.get(), b.get()}) ASSERT_TRUE(g->forward(std::span(prompt).first(9), 0, l).ok());
    std::vector<int32_t> dev(20, -1), dev1(20, -2), devg(20, -3);
    ASSERT_TRUE(a->decode_sample(prompt[9], 9, p, 5, dev).ok());  // draws 5, 6, ...
    ASSERT_TRUE(k->decode_sample(prompt[9], 9, p, 5, dev1).ok());
    ASSERT_TRUE(gs->decode_sample(prompt[9], 9, p, 5, devg).ok());
    EXPECT_EQ(dev1, dev) << "1 step per launch vs the default";
    EXPECT_EQ(devg, dev) << "the draw in one block vs over 64";
    expect_host_sampling_loop(*b, p, 5, prompt[9], 9, dev, l);
    std::set<int32_t> distinct(dev.begin(), dev.end());
    EXPECT_GT(distinct.size(), 5u) << "the draws should spread (else this test shows little)";
    // Greedy after a sampled call on the same backend: the state's temperature is reset.
    std::vector<int32_t> g1(4), g2(4);
    ASSERT_TRUE(a->forward(std::vector<int32_t>{1}, 29, l).ok());
    ASSERT_TRUE(a->decode_greedy(2, 30, g1).ok());
    ASSERT_TRUE(b->forward(std::vector<int32_t>{1}, 29, l).ok());
    ASSERT_TRUE(b->decode_greedy(2, 30, g2).ok());
    EXPECT_EQ(g1, g2) << "greedy after sampling";
  }
  SamplingParams penalty;
  penalty.temperature = 1.f;
  penalty.top_p = 0.9f;
  penalty.repetition_penalty = 1.1f;
  auto c = make_gpu(m, 64);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->can_decode_sample(SamplingParams{.temperature = 1.f, .top_k = 40, .top_p = 0.9f}));
  EXPECT_FALSE(c->can_decode_sample(penalty));
  std::vector<int32_t> o(2);
  EXPECT_FALSE(c->decode_sample(1, 0, penalty, 0, o).ok()) << "a repetition penalty is applied on the host";
}

// Top-k and top-p drawn on the device (ops/sample_select.cuh in the finish kernel) give the host loop's tokens, over
// 64 blocks and one; k and p small enough to cut the flat distribution of a random model.
TEST(Backend, DeviceTopKTopPLoopEqualsHostLoop) {
  const int V = 777;
  Model m = make_random_model(small_config(Family::Llama, 64, 4, 2, false, V), DType::BF16, 12);
  auto prompt = random_tokens(10, V, 4);
  const SamplingParams rules[] = {{.temperature = 1.5f, .top_k = 20, .seed = 7},
                                  {.temperature = 1.5f, .top_p = 0.8f, .seed = 8},
                                  {.temperature = 2.f, .top_k = 300, .top_p = 0.5f, .min_p = 0.02f, .seed = 9},
                                  {.temperature = 0.7f, .top_k = 3, .top_p = 0.95f, .seed = 10}};
  for (const SamplingParams& p : rules) {
    SCOPED_TRACE(cat("top_k ", p.top_k, " top_p ", p.top_p, " min_p ", p.min_p));
    cuda::CudaBackendOptions single;
    single.sample_blocks = 1;
    auto a = make_gpu(m, 128), gs = make_gpu(m, 128, single), b = make_gpu(m, 128);
    ASSERT_TRUE(a && gs && b);
    ASSERT_TRUE(a->can_decode_sample(p));
    std::vector<float> l(size_t(V), 0.f);
    for (auto* g : {a.get(), gs.get(), b.get()}) ASSERT_TRUE(g->forward(std::span(prompt).first(9), 0, l).ok());
    std::vector<int32_t> dev(24, -1), devg(24, -3);
    ASSERT_TRUE(a->decode_sample(prompt[9], 9, p, 5, dev).ok());  // draws 5, 6, ...
    ASSERT_TRUE(gs->decode_sample(prompt[9], 9, p, 5, devg).ok());
    EXPECT_EQ(devg, dev) << "the draw in one block vs over 64";
    expect_host_sampling_loop(*b, p, 5, prompt[9], 9, dev, l);
    std::set<int32_t> distinct(dev.begin(), dev.end());
    EXPECT_GT(distinct.size(), 2u) << "the draws should spread (else this test shows little)";
  }
}

TEST(Backend, BadInputIsAnErrorNotACrash) {
  Model m = make_random_model(small_config(Family::Llama, 64, 4, 2, true, 500), DType::BF16, 2);
  auto gpu = make_gpu(m, 64);
  ASSERT_TRUE(gpu);
  std::vector<float> l(500), short_l(10);
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>{1, 2}, 5, l).ok());      // pos != cached
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>{1, 500}, 0, l).ok());    // token out of range
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>{-1}, 0, l).ok());
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>{1}, 0, short_l).ok());   // logits size
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>(65, 1), 0, l).ok());     // beyond the context
  EXPECT_FALSE(gpu->forward(std::vector<int32_t>{}, 0, l).ok());
  EXPECT_TRUE(gpu->forward(std::vector<int32_t>{1, 2}, 0, l).ok());
  auto huge = make_cuda_backend(m, 1 << 30);  // a KV cache far beyond GPU memory
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.message().find("MiB"), std::string::npos) << huge.message();
}

TEST(Backend, GoldenModelsMatchCpu) {
  // The source tree the binary was built from, else the working directory's (binaries carried to the GPU
  // machine run from a copy of the repository root).
  fs::path dir = fs::path(MK_SOURCE_DIR) / "tests" / "golden";
  if (!fs::is_directory(dir)) dir = fs::path("tests") / "golden";
  int n = 0;
  if (fs::is_directory(dir))
    for (auto& e : fs::directory_iterator(dir)) {
      if (!fs::exists(e.path() / "config.json")) continue;
      SCOPED_TRACE(e.path().filename().string());
      LoadOptions lo;
      lo.prefault = false;
      lo.progress = LoadOptions::Progress::Never;
      auto m = load_model(e.path(), lo);
      ASSERT_TRUE(m) << m.message();
      compare_with_cpu(*m, random_tokens(19, m->config.n_vocab, 4), 12);
      {
        SCOPED_TRACE("rope_pair_rows = true (make_cuda_backend's default)");
        compare_with_cpu(*m, random_tokens(19, m->config.n_vocab, 4), 12, {}, true);
      }
      ++n;
    }
  EXPECT_GT(n, 0) << "no golden models in " << dir;
}

}  // namespace
}  // namespace mk::gpu_test
