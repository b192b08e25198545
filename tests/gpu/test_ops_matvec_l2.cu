// The pre-wait knobs of the split-K decode matvec (src/cuda/ops/matvec.cu): a share of another buffer
// (MatvecArgs::l2_prefetch) and each block's next groups (set_matvec_l2_next) are L2 hints, and add_early reads the
// residual rows early; all act before the PDL wait and must not change a single output bit, nor read outside the buffers (compute-sanitizer memcheck), at sizes
// where blocks own several groups, odd row counts, and prefetch sizes that are not multiples of 16 bytes.
// Run: test_gpu --gtest_filter='MatvecL2*'
#include <random>

#include "cpu/ops.h"
#include "cuda/ops/matvec_internal.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {
namespace {

using cuda::MatvecArgs;
using cuda::MatvecOut;

struct L2Case {
  int rows, cols;
  MatvecOut mode;
  int l2next;
  size_t other_bytes;  // size of the l2_prefetch buffer (0: none)
};

TEST(MatvecL2, PrefetchKnobsDoNotChangeResults) {
  uint32_t seed = 500;
  for (const L2Case& c : {L2Case{9001, 2048, MatvecOut::STORE, 1, 0}, L2Case{9000, 2056, MatvecOut::SWIGLU, 2, 1000},
                          L2Case{2048, 8192, MatvecOut::ADD, 3, (size_t(1) << 22) + 8},
                          L2Case{130, 264, MatvecOut::ADD, 8, 40}, L2Case{16384, 512, MatvecOut::STORE, 2, 65536}}) {
    SCOPED_TRACE(cat(c.rows, "x", c.cols, " mode ", int(c.mode), " l2next ", c.l2next, " other ", c.other_bytes));
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
    DeviceArray<uint8_t> other(c.other_bytes ? c.other_bytes : 16);
    auto run = [&](int l2next, bool with_other, bool add_early) {
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
      if (with_other && c.other_bytes) {
        a.l2_prefetch = other.p;
        a.l2_prefetch_bytes = c.other_bytes;
      }
      cuda::set_matvec_l2_next(l2next);
      cuda::matvec(cuda::Stream(nullptr, true), a);
      cuda::set_matvec_l2_next(0);
      CUDA_CHECK_LAUNCH();
      return dout.download();
    };
    const std::vector<float> plain = run(0, false, false), hinted = run(c.l2next, true, false);
    EXPECT_LT(rel_err(plain, want), 2e-5);
    EXPECT_LT(rel_err(hinted, want), 2e-5);
    EXPECT_EQ(plain, hinted) << "the prefetch hints changed the result bits";
    if (c.mode == MatvecOut::ADD) {  // residual rows read before the PDL wait: the same bits
      EXPECT_EQ(run(0, false, true), plain) << "add_early changed the result bits";
      EXPECT_EQ(run(c.l2next, true, true), plain) << "add_early + hints changed the result bits";
    }
  }
}

}  // namespace
}  // namespace mk::gpu_test
