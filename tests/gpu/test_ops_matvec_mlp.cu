// The fused decode MLP (matvec_mlp, src/cuda/ops/matvec_mlp.cu): gate/up + SwiGLU, a grid barrier, down + residual
// in one kernel. It must give the bits of matvec(gate_up) then matvec(down) (the same block program), match the CPU
// reference, and keep doing so over repeated launches on one barrier counter (the counter is never reset).
// Run: test_gpu --gtest_filter='MatvecMlp*'
#include "cpu/ops.h"
#include "cuda/ops/matvec.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {
namespace {

using cuda::MatvecArgs;
using cuda::MatvecOut;
using bf16 = __nv_bfloat16;

struct Mlp {
  int E, F;
  bool h_bf16;
};

void run(const Mlp& m, uint32_t seed, int n_launches = 3) {
  SCOPED_TRACE(cat("n_embd ", m.E, " n_ff ", m.F, m.h_bf16 ? " h bf16" : " h f32"));
  std::mt19937 rng(seed);
  Bf16Data wgu = to_bf16(randn(size_t(2 * m.F) * m.E, rng, 0.05f));  // rows interleaved gate, up
  Bf16Data wd = to_bf16(randn(size_t(m.E) * m.F, rng, 0.05f));
  std::vector<float> x = randn(size_t(m.E), rng, 1.f, 0.2f), nw = randn(size_t(m.E), rng, 0.1f, 1.f);

  DeviceArray<uint16_t> dgu(wgu.bits), dd(wd.bits);
  DeviceArray<float> dnw(nw), dx_fused(x), dx_split(x), dh(size_t(m.F));
  DeviceArray<uint16_t> dhb(size_t(m.F));
  DeviceArray<unsigned long long> barrier(1);
  CUDA_CHECK(cudaMemset(barrier.p, 0, 8));
  auto args = [&](float* xp) {
    MatvecArgs gu{.w = reinterpret_cast<const bf16*>(dgu.p), .n_rows = 2 * m.F, .n_cols = m.E, .x = xp,
                  .norm_w = dnw.p, .eps = 1e-5f, .mode = MatvecOut::SWIGLU};
    MatvecArgs down{.w = reinterpret_cast<const bf16*>(dd.p), .n_rows = m.E, .n_cols = m.F, .out = xp,
                    .mode = MatvecOut::ADD, .add_early = true};
    if (m.h_bf16) {
      gu.out_bf16 = reinterpret_cast<bf16*>(dhb.p);
      down.x_bf16 = gu.out_bf16;
    } else {
      gu.out = dh.p;
      down.x = dh.p;
    }
    return std::pair{gu, down};
  };
  auto [gu_f, down_f] = args(dx_fused.p);
  auto [gu_s, down_s] = args(dx_split.p);
  ASSERT_TRUE(cuda::matvec_mlp_supported(gu_f, down_f));

  // CPU reference of one step: x += Wd h, h = swiglu of (Wgu rmsnorm(x)) rounded like the GPU's h.
  auto cpu_step = [&](std::vector<float>& xr) {
    std::vector<float> n(size_t(m.E)), y(size_t(2 * m.F)), g(size_t(m.F)), u(size_t(m.F)), h(size_t(m.F)),
        o(size_t(m.E));
    cpu::rmsnorm(n.data(), xr.data(), view(nw, {m.E}), 1e-5f, m.E);
    TensorView wv{.dtype = DType::BF16, .shape = {2 * m.F, m.E}, .data = wgu.bits.data(), .name = "w_gate_up"};
    cpu::matvec(y.data(), wv, n.data(), nullptr);
    for (int i = 0; i < m.F; ++i) g[size_t(i)] = y[2 * size_t(i)], u[size_t(i)] = y[2 * size_t(i) + 1];
    cpu::swiglu(h.data(), g.data(), u.data(), m.F);
    if (m.h_bf16)
      for (float& v : h) v = bf16_to_f32(f32_to_bf16(v));
    TensorView dv{.dtype = DType::BF16, .shape = {m.E, m.F}, .data = wd.bits.data(), .name = "w_down"};
    cpu::matvec(o.data(), dv, h.data(), nullptr);
    for (int i = 0; i < m.E; ++i) xr[size_t(i)] += o[size_t(i)];
  };

  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  std::vector<float> want = x;
  for (int step = 0; step < n_launches; ++step) {  // launches on one barrier counter, chained with PDL
    SCOPED_TRACE(cat("launch ", step));
    cuda::matvec_mlp(cuda::Stream(st, true), gu_f, down_f, barrier.p);
    cuda::matvec(cuda::Stream(st, true), gu_s);
    cuda::matvec(cuda::Stream(st, true), down_s);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(st));
    cpu_step(want);
    const std::vector<float> got = dx_fused.download(), split = dx_split.download();
    ASSERT_EQ(got, split) << "fused vs matvec(gate_up) + matvec(down)";
    const double err = rel_err(got, want);
    EXPECT_LT(err, m.h_bf16 ? 2e-3 : 2e-5) << "vs CPU, rel err " << err;
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(MatvecMlp, FusedEqualsTwoMatvecsAndCpu) {
  run({2048, 8192, true}, 1, 12);  // Llama-3.2-1B
  run({2048, 8192, false}, 2);
  run({4096, 1024, true}, 3);   // 4 slices, 1 slice
  run({136, 520, true}, 4);     // widths that are not powers of two, one slice each
  run({1024, 4096, false}, 5);
}

TEST(MatvecMlp, UnsupportedShapesAreRefused) {
  MatvecArgs gu{.w = reinterpret_cast<const bf16*>(uintptr_t(256)), .n_rows = 2 * 3072, .n_cols = 1024,
                .x = reinterpret_cast<float*>(uintptr_t(512)), .norm_w = reinterpret_cast<float*>(uintptr_t(768)),
                .out = reinterpret_cast<float*>(uintptr_t(1024)), .mode = MatvecOut::SWIGLU};
  MatvecArgs down{.w = gu.w, .n_rows = 1024, .n_cols = 3072, .x = gu.out, .out = const_cast<float*>(gu.x),
                  .mode = MatvecOut::ADD};
  EXPECT_FALSE(cuda::matvec_mlp_supported(gu, down)) << "3 slices of 1024 do not fill 8 warps";
  gu.n_rows = 2 * 4096;
  down.n_cols = 4096;
  EXPECT_TRUE(cuda::matvec_mlp_supported(gu, down));
  down.x = nullptr;
  EXPECT_FALSE(cuda::matvec_mlp_supported(gu, down)) << "down must read the h gate/up writes";
}

}  // namespace
}  // namespace mk::gpu_test
