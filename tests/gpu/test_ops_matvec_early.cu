// MatvecArgs::add_early of the split-K decode matvec (src/cuda/ops/matvec.cu): the residual rows are read before
// the PDL wait; that must not change a single output bit, nor read outside the buffers (compute-sanitizer
// memcheck), at sizes where blocks own several groups and at odd row counts. The other modes ignore the flag.
// Run: test_gpu --gtest_filter='MatvecEarly*'
#include <random>

#include "cpu/ops.h"
#include "cuda/ops/matvec_internal.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {
namespace {

using cuda::MatvecArgs;
using cuda::MatvecOut;

struct EarlyCase {
  int rows, cols;
  MatvecOut mode;
};

TEST(MatvecEarly, AddEarlyDoesNotChangeResults) {
  uint32_t seed = 500;
  for (const EarlyCase& c : {EarlyCase{9001, 2048, MatvecOut::STORE}, EarlyCase{9000, 2056, MatvecOut::SWIGLU},
                             EarlyCase{2048, 8192, MatvecOut::ADD}, EarlyCase{130, 264, MatvecOut::ADD},
                             EarlyCase{16385, 512, MatvecOut::ADD}}) {
    SCOPED_TRACE(cat(c.rows, "x", c.cols, " mode ", int(c.mode)));
    std::mt19937 rng(seed++);
    Bf16Data w = to_bf16(randn(size_t(c.rows) * c.cols, rng, 0.05f));
    std::vector<float> x = randn(size_t(c.cols), rng, 1.f, 0.3f), nw = randn(size_t(c.cols), rng, 0.1f, 1.f);
    const int n_out = c.mode == MatvecOut::SWIGLU ? c.rows / 2 : c.rows;
    std::vector<float> out0 = randn(size_t(n_out), rng);

    // CPU reference: y = W rmsnorm(x), then the mode.
    TensorView wv;
    wv.dtype = DType::BF16;
    wv.shape = {c.rows, c.cols};
    wv.data = w.bits.data();
    wv.name = "w";
    std::vector<float> xn(x.size()), y(static_cast<size_t>(c.rows)), want(static_cast<size_t>(n_out));
    cpu::rmsnorm(xn.data(), x.data(), view(nw, {c.cols}), 1e-5f, c.cols);
    cpu::matvec(y.data(), wv, xn.data(), nullptr);
    if (c.mode == MatvecOut::STORE) want = y;
    if (c.mode == MatvecOut::ADD) cpu::add(want.data(), out0.data(), y.data(), n_out);
    if (c.mode == MatvecOut::SWIGLU) {
      std::vector<float> g(static_cast<size_t>(n_out)), u(static_cast<size_t>(n_out));
      for (int i = 0; i < n_out; ++i) g[size_t(i)] = y[2 * size_t(i)], u[size_t(i)] = y[2 * size_t(i) + 1];
      cpu::swiglu(want.data(), g.data(), u.data(), n_out);
    }

    DeviceArray<uint16_t> dw(w.bits);
    DeviceArray<float> dx(x), dnw(nw), dout(static_cast<size_t>(n_out));
    auto run = [&](bool add_early) {
      if (c.mode == MatvecOut::ADD) dout.upload(out0);
      else dout.poison();
      MatvecArgs a;
      a.w = reinterpret_cast<const __nv_bfloat16*>(dw.p);
      a.n_rows = c.rows;
      a.n_cols = c.cols;
      a.x = dx.p;
      a.norm_w = dnw.p;
      a.eps = 1e-5f;
      a.out = dout.p;
      a.mode = c.mode;
      a.add_early = add_early;
      cuda::matvec(cuda::Stream(nullptr, true), a);
      CUDA_CHECK_LAUNCH();
      return dout.download();
    };
    const std::vector<float> plain = run(false), early = run(true);
    EXPECT_LT(rel_err(plain, want), 2e-5);
    EXPECT_EQ(plain, early) << "add_early changed the result bits";
  }
}

}  // namespace
}  // namespace mk::gpu_test
