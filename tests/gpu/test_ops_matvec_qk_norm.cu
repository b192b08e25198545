// The QKV matvec with Qwen3's per-head q/k RMSNorm, RoPE and the K/V cache write in its epilogue
// (MatvecOut::ROPE_QKV_NORM, src/cuda/ops/matvec.cu) against the CPU reference in its order: cpu::rmsnorm of x,
// cpu::matvec (+ bias), cpu::rmsnorm of every q and k head (q_norm / k_norm), cpu::rope of q and k. Random inputs,
// poisoned q and caches (every cache element but the position's row must stay poison), head dims 64 and 128, GQA
// ratios 1-8, widths that give 1-5 column slices per pair and both register builds, with and without bias.
// Outputs are bf16: relative error bound 2^-9 (bf16 rounding) + 1e-4 (f32 summation order).
// Run: test_gpu --gtest_filter='MatvecQkNorm*'
#include <tuple>

#include "cpu/ops.h"
#include "cuda/ops/matvec_internal.h"
#include "gpu_test_util.h"
#include "rope_qkv_fixture.h"

namespace mk::gpu_test {
namespace {

using cuda::MatvecOut;

constexpr double TOL = 1.0 / 512 + 1e-4;

struct Case {
  int n_head, n_kv, D, E;
  bool bias;
  int pos;  // >= the cache capacity (128): q only, the caches stay untouched
};

void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(cat(c.n_head, "/", c.n_kv, " heads, D ", c.D, ", E ", c.E, c.bias ? ", bias" : "", ", pos ", c.pos));
  std::mt19937 rng(seed);
  const int D = c.D, Q = c.n_head * D, KV = c.n_kv * D, R = Q + 2 * KV;
  const float eps = 1e-6f, qk_eps = 1e-5f;
  Bf16Data w = to_bf16(randn(size_t(R) * c.E, rng, 0.05f));
  std::vector<float> x = randn(size_t(c.E), rng, 1.f, 0.2f), g = randn(size_t(c.E), rng, 0.1f, 1.f);
  std::vector<float> b = randn(size_t(R), rng, 0.5f);
  std::vector<float> qn = randn(size_t(D), rng, 0.3f, 1.f), kn = randn(size_t(D), rng, 0.3f, 0.8f);
  RopeConfig rc;
  rc.theta = 1000000.f;
  std::vector<float> inv_freq;
  cpu::rope_inv_freq(inv_freq, rc, D);

  // Reference, HF order.
  std::vector<float> xn(static_cast<size_t>(c.E)), y(static_cast<size_t>(R));
  cpu::rmsnorm(xn.data(), x.data(), view(g, {c.E}), eps, c.E);
  TensorView bv = view(b, {R});
  cpu::matvec(y.data(), bf16_view(w, R, c.E), xn.data(), c.bias ? &bv : nullptr);
  for (int h = 0; h < c.n_head + c.n_kv; ++h) {
    float* yh = y.data() + size_t(h) * D;
    cpu::rmsnorm(yh, yh, view(h < c.n_head ? qn : kn, {D}), qk_eps, D);
  }
  cpu::rope(y.data(), c.n_head, D, c.pos, inv_freq.data());
  cpu::rope(y.data() + Q, c.n_kv, D, c.pos, inv_freq.data());

  RopeQkvDevice dev(w.bits, b, x, g, inv_freq, c.n_head, c.n_kv, D, c.E, c.pos);
  DeviceArray<float> dqn(qn), dkn(kn);
  std::vector<uint16_t> first_q;
  for (const char* kernel : {"splitk", "rowpair"}) {  // rowpair selected: ROPE_QKV_NORM must still take split-K
    SCOPED_TRACE(kernel);
    cuda::set_matvec_kernel(kernel);
    dev.poison();
    cuda::MatvecArgs a = dev.args(MatvecOut::ROPE_QKV_NORM, c.bias, eps);
    a.rope.q_norm = dqn.p;
    a.rope.k_norm = dkn.p;
    a.rope.eps = qk_eps;
    const unsigned long long launches = cuda::matvec_launch_count(MatvecOut::ROPE_QKV_NORM);
    cuda::matvec(cuda::Stream(nullptr, true), a);
    CUDA_CHECK_LAUNCH();
    EXPECT_EQ(cuda::matvec_launch_count(MatvecOut::ROPE_QKV_NORM), launches + 1);
    const std::vector<uint16_t> q_bits = dev.q.download(), k_bits = dev.k_cache.download(),
                                v_bits = dev.v_cache.download();
    EXPECT_LT(rel_err(bf16_bits_to_f32(q_bits), std::vector<float>(y.begin(), y.begin() + Q)), TOL) << "q";
    // Position pos sits in table[pos / 64] = block (pos < 64 ? 1 : 0); every other row must still be poison.
    const size_t row = dev.cache_row(c.pos);
    for (auto [bits, want, what] : {std::tuple{&k_bits, y.begin() + Q, "k"}, {&v_bits, y.begin() + Q + KV, "v"}}) {
      size_t touched = 0;
      for (size_t i = 0; i < bits->size(); ++i)
        if ((i < row || i >= row + KV) && (*bits)[i] != 0xffff) ++touched;
      EXPECT_EQ(touched, 0u) << what << " cache elements written outside position " << c.pos;
      if (row == SIZE_MAX) continue;
      std::vector<float> got = bf16_bits_to_f32(std::vector<uint16_t>(bits->begin() + row, bits->begin() + row + KV));
      EXPECT_LT(rel_err(got, std::vector<float>(want, want + KV)), TOL) << what;
    }
    // The head's sum of squares is added up in a fixed order: the same bits every run.
    if (first_q.empty()) first_q = q_bits;
    else EXPECT_EQ(q_bits, first_q) << "not deterministic";
  }
  cuda::set_matvec_kernel("splitk");
}

TEST(MatvecQkNorm, RopeQkvNormModeMatchesCpuReference) {
  uint32_t seed = 300;
  for (const Case& c : {Case{16, 8, 128, 1024, false, 70},  // Qwen3-0.6B: 1 slice per pair, 8 pairs per block
                        Case{16, 8, 128, 2048, true, 5},    // Qwen3-1.7B: 2 slices, 2 groups per block
                        Case{32, 8, 128, 4096, false, 127}, // Qwen3-8B: 4 slices, GQA 4
                        Case{8, 1, 64, 512, true, 64},      // head dim 64, GQA 8
                        Case{4, 4, 64, 4104, true, 3},      // 5 slices (one partial): 1 pair per group
                        Case{6, 2, 128, 96, false, 0},      // narrow rows, partial slice
                        Case{4, 2, 64, 8200, true, 100},    // wider than the register-capped build: 16-load build
                        Case{2, 1, 128, 256, true, 128}}) { // position past the cache: q only
    run_case(c, seed++);
  }
}

}  // namespace
}  // namespace mk::gpu_test
