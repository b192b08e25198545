// Decode matvec (src/cuda/ops/matvec.cu) against cpu::matvec / rmsnorm / swiglu / add / argmax, on random data
// with poisoned outputs and awkward sizes. Inputs are f32 (or bf16) and weights bf16 on both sides, so only the
// summation order differs: relative error bound 2e-5 (f32 accumulation over up to 8192 terms).
// The split-K kernel in ADD mode also runs with add_early (residual rows read before the PDL wait): bit-identical;
// without the norm its results are the STORE mode's plus the old rows, bit for bit;
// SWIGLU mode also writes bf16 (out_bf16): the f32 results rounded, bit for bit. The split-K kernel's two loop forms
// (set_matvec_loop_form: one or two waits per group) give the same bits.
// Run: test_gpu --gtest_filter='Matvec*'
#include <memory>
#include <tuple>

#include "cpu/ops.h"
#include "cuda/ops/matvec_internal.h"
#include "gpu_test_util.h"
#include "rope_qkv_fixture.h"

namespace mk::gpu_test {
namespace {

using cuda::MatvecArgs;
using cuda::MatvecOut;

constexpr double TOL = 2e-5;

struct Case {
  int rows, cols;
  MatvecOut mode;
  bool norm, bias, x_bf16, argmax;
};

std::string name(const Case& c) {
  return cat(c.rows, "x", c.cols, " mode ", int(c.mode), c.norm ? " norm" : "", c.bias ? " bias" : "",
             c.x_bf16 ? " x_bf16" : "", c.argmax ? " argmax" : "");
}

// Both kernels (split-K, the default, and rowpair) must compute the same function.
enum class Kernel { SPLITK, ROWPAIR };
void run_case_with(const Case& c, uint32_t seed, Kernel kernel) {
  const char* kname[] = {" [splitk]", " [rowpair]"};
  SCOPED_TRACE(name(c) + kname[int(kernel)]);
  std::mt19937 rng(seed);
  Bf16Data w = to_bf16(randn(size_t(c.rows) * c.cols, rng, 0.05f));
  std::vector<float> x = randn(size_t(c.cols), rng, 1.f, 0.3f);
  Bf16Data xb = to_bf16(x);
  if (c.x_bf16) x = xb.f;
  std::vector<float> nw = randn(size_t(c.cols), rng, 0.1f, 1.f);
  std::vector<float> bias = randn(size_t(c.rows), rng, 0.5f);
  int n_out = c.mode == MatvecOut::SWIGLU ? c.rows / 2 : c.rows;
  std::vector<float> out0 = randn(size_t(n_out), rng);

  // Reference.
  const TensorView wv = bf16_view(w, c.rows, c.cols);
  std::vector<float> xn(x.size());
  if (c.norm) cpu::rmsnorm(xn.data(), x.data(), view(nw, {c.cols}), 1e-5f, c.cols);
  else xn = x;
  std::vector<float> y(static_cast<size_t>(c.rows));
  TensorView bv = view(bias, {c.rows});
  cpu::matvec(y.data(), wv, xn.data(), c.bias ? &bv : nullptr);
  std::vector<float> want(static_cast<size_t>(n_out));
  if (c.mode == MatvecOut::STORE) want = y;
  if (c.mode == MatvecOut::ADD) cpu::add(want.data(), out0.data(), y.data(), n_out);
  if (c.mode == MatvecOut::SWIGLU) {
    std::vector<float> g(static_cast<size_t>(n_out)), u(static_cast<size_t>(n_out));
    for (int i = 0; i < n_out; ++i) g[size_t(i)] = y[2 * size_t(i)], u[size_t(i)] = y[2 * size_t(i) + 1];
    cpu::swiglu(want.data(), g.data(), u.data(), n_out);
  }

  // Device.
  DeviceArray<uint16_t> dw(w.bits);
  DeviceArray<float> dx(x), dnw(nw), dbias(bias), dout(static_cast<size_t>(n_out));
  DeviceArray<uint16_t> dxb(xb.bits);
  DeviceArray<unsigned long long> dam(1);
  if (c.mode == MatvecOut::ADD) dout.upload(out0);
  else dout.poison();
  CUDA_CHECK(cudaMemset(dam.p, 0, 8));
  MatvecArgs a;
  a.w = reinterpret_cast<const __nv_bfloat16*>(dw.p);
  a.n_rows = c.rows;
  a.n_cols = c.cols;
  if (c.x_bf16) a.x_bf16 = reinterpret_cast<const __nv_bfloat16*>(dxb.p);
  else a.x = dx.p;
  a.norm_w = c.norm ? dnw.p : nullptr;
  a.eps = 1e-5f;
  a.bias = c.bias ? dbias.p : nullptr;
  a.out = dout.p;
  a.mode = c.mode;
  a.argmax = c.argmax ? dam.p : nullptr;
  if (kernel == Kernel::ROWPAIR) cuda::matvec_rowpair(cuda::Stream(nullptr, true), a);
  else cuda::matvec_splitk(cuda::Stream(nullptr, true), a);
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dout.download();
  double err = rel_err(got, want);
  EXPECT_LT(err, TOL) << "rel err " << err;
  if (c.argmax) {
    // Exact: the fused argmax must pick what cpu::argmax picks on the kernel's own outputs (first on ties).
    int32_t dev_arg = cuda::argmax_unpack(dam.download()[0]);
    EXPECT_EQ(dev_arg, cpu::argmax(got.data(), n_out));
  }
  if (kernel == Kernel::SPLITK) {  // both loop forms, whichever the default chose: the same bits
    for (int form : {0, 1}) {
      if (c.mode == MatvecOut::ADD) dout.upload(out0);
      else dout.poison();
      cuda::set_matvec_loop_form(form);
      cuda::matvec_splitk(cuda::Stream(nullptr, true), a);
      cuda::set_matvec_loop_form(-1);
      CUDA_CHECK_LAUNCH();
      EXPECT_EQ(dout.download(), got) << "loop form " << form << " changed the result bits";
    }
  }
  if (c.mode == MatvecOut::SWIGLU) {  // out_bf16: the same values, rounded to bf16 (out not written)
    DeviceArray<uint16_t> hb(static_cast<size_t>(n_out));
    hb.poison();
    dout.poison();
    MatvecArgs b = a;
    b.out = nullptr;
    b.out_bf16 = reinterpret_cast<__nv_bfloat16*>(hb.p);
    if (kernel == Kernel::ROWPAIR) cuda::matvec_rowpair(cuda::Stream(nullptr, true), b);
    else cuda::matvec_splitk(cuda::Stream(nullptr, true), b);
    CUDA_CHECK_LAUNCH();
    const std::vector<uint16_t> bits = hb.download();
    for (int i = 0; i < n_out; ++i)
      ASSERT_EQ(bits[size_t(i)], f32_to_bf16(got[size_t(i)])) << "h[" << i << "] in bf16";
    const std::vector<float> untouched = dout.download();
    for (float v : untouched) ASSERT_TRUE(std::isnan(v)) << "out written although out_bf16 was given";
  }
  if (kernel == Kernel::SPLITK && c.mode == MatvecOut::ADD) {  // residual rows read before the PDL wait: same bits
    dout.upload(out0);
    a.add_early = true;
    cuda::matvec_splitk(cuda::Stream(nullptr, true), a);
    CUDA_CHECK_LAUNCH();
    EXPECT_EQ(dout.download(), got) << "add_early changed the result bits";
    if (!c.norm) {  // out = out0 + the STORE mode's y, bit for bit (each block reads its later groups' rows ahead)
      MatvecArgs b = a;
      b.mode = MatvecOut::STORE;
      b.add_early = false;
      cuda::matvec_splitk(cuda::Stream(nullptr, true), b);
      CUDA_CHECK_LAUNCH();
      const std::vector<float> ys = dout.download();
      for (int i = 0; i < n_out; ++i) ASSERT_EQ(got[size_t(i)], out0[size_t(i)] + ys[size_t(i)]) << "row " << i;
    }
  }
}

void run_case(const Case& c, uint32_t seed) {
  run_case_with(c, seed, Kernel::SPLITK);
  run_case_with(c, seed, Kernel::ROWPAIR);
}

TEST(Matvec, MatchesCpuReferenceOnAwkwardSizes) {
  uint32_t seed = 1;
  for (auto [rows, cols] : {std::pair{1, 8}, {2, 8}, {7, 24}, {33, 200}, {130, 264}, {301, 2056}, {2048, 2048},
                            {514, 8200}, {96, 14336}, {20002, 1032}}) {  // the last: ~13 groups per block
    for (MatvecOut mode : {MatvecOut::STORE, MatvecOut::ADD, MatvecOut::SWIGLU}) {
      if (mode == MatvecOut::SWIGLU && rows % 2) continue;
      for (bool norm : {false, true}) {
        run_case({rows, cols, mode, norm, (rows % 3) == 1, false, false}, seed++);
      }
    }
    run_case({rows, cols, MatvecOut::STORE, false, false, true, false}, seed++);  // bf16 input
  }
}

TEST(Matvec, FusedArgmaxMatchesCpuArgmax) {
  uint32_t seed = 100;
  for (auto [rows, cols] : {std::pair{1, 8}, {3, 16}, {1001, 72}, {32000, 256}, {128256, 64}})
    for (bool norm : {false, true}) run_case({rows, cols, MatvecOut::STORE, norm, false, false, true}, seed++);
}

TEST(Matvec, ArgmaxTiesPickTheFirstIndex) {
  // Every row identical: all outputs equal, so the answer must be row 0.
  const int rows = 999, cols = 64;
  std::mt19937 rng(7);
  Bf16Data row = to_bf16(randn(size_t(cols), rng));
  std::vector<uint16_t> w;
  for (int r = 0; r < rows; ++r) w.insert(w.end(), row.bits.begin(), row.bits.end());
  std::vector<float> x = randn(size_t(cols), rng);
  DeviceArray<uint16_t> dw(w);
  DeviceArray<float> dx(x), dout(static_cast<size_t>(rows));
  DeviceArray<unsigned long long> dam(1);
  CUDA_CHECK(cudaMemset(dam.p, 0, 8));
  MatvecArgs a;
  a.w = reinterpret_cast<const __nv_bfloat16*>(dw.p);
  a.n_rows = rows;
  a.n_cols = cols;
  a.x = dx.p;
  a.out = dout.p;
  a.argmax = dam.p;
  cuda::matvec(cuda::Stream(nullptr, false), a);
  EXPECT_EQ(cuda::argmax_unpack(dam.download()[0]), 0);
}

// QKV projection with RoPE + cache write in the epilogue: rows of each head in rope-pair order.
TEST(Matvec, RopeQkvModeMatchesCpuRopeAndWritesCache) {
  for (auto [n_head, n_kv, D, E, bias] : {std::tuple{4, 2, 64, 256, false}, {2, 1, 128, 2056, true}, {3, 3, 32, 96, true}}) {
    SCOPED_TRACE(cat(n_head, "/", n_kv, " D ", D, " E ", E, bias ? " bias" : ""));
    std::mt19937 rng(uint32_t(D + E));
    const int Q = n_head * D, KV = n_kv * D, R = Q + 2 * KV, pos = 70;
    Bf16Data w = to_bf16(randn(size_t(R) * E, rng, 0.05f));
    std::vector<float> x = randn(size_t(E), rng), g = randn(size_t(E), rng, 0.1f, 1.f), b = randn(size_t(R), rng, 0.3f);
    RopeConfig rc;
    rc.theta = 10000.f;
    std::vector<float> inv_freq;
    cpu::rope_inv_freq(inv_freq, rc, D);
    // Reference in HF order.
    std::vector<float> xn(static_cast<size_t>(E)), y(static_cast<size_t>(R));
    cpu::rmsnorm(xn.data(), x.data(), view(g, {E}), 1e-6f, E);
    TensorView bv = view(b, {R});
    cpu::matvec(y.data(), bf16_view(w, R, E), xn.data(), bias ? &bv : nullptr);
    cpu::rope(y.data(), n_head, D, pos, inv_freq.data());
    cpu::rope(y.data() + Q, n_kv, D, pos, inv_freq.data());
    RopeQkvDevice dev(w.bits, b, x, g, inv_freq, n_head, n_kv, D, E, pos);
    dev.poison();
    cuda::matvec(cuda::Stream(nullptr, true), dev.args(MatvecOut::ROPE_QKV, bias, 1e-6f));
    CUDA_CHECK_LAUNCH();
    auto gq = bf16_bits_to_f32(dev.q.download()), gk = bf16_bits_to_f32(dev.k_cache.download()),
         gv = bf16_bits_to_f32(dev.v_cache.download());
    const size_t row = dev.cache_row(pos);
    std::vector<float> got_k(gk.begin() + row, gk.begin() + row + KV), got_v(gv.begin() + row, gv.begin() + row + KV);
    EXPECT_LT(rel_err(gq, std::vector<float>(y.begin(), y.begin() + Q)), 1e-2);
    EXPECT_LT(rel_err(got_k, std::vector<float>(y.begin() + Q, y.begin() + Q + KV)), 1e-2);
    EXPECT_LT(rel_err(got_v, std::vector<float>(y.begin() + Q + KV, y.end())), 1e-2);
  }
}


// A chain of dependent split-K matvecs launched back to back with PDL (eager and as a CUDA graph), with and without
// trigger_at_start (the next kernel launches before this one's wait): a missing wait would show up here as a wrong or
// NaN result.
TEST(Matvec, ChainUnderPdlMatchesCpu) {
  const int E = 1032, F = 2 * 1400;  // h = swiglu(Wgu rmsnorm(x)); x += Wd h; y = Wq x, three times
  std::mt19937 rng(77);
  struct Layer {
    Bf16Data gu, d;
    std::vector<float> g;
  };
  std::vector<Layer> layers(3);
  for (auto& l : layers) {
    l.gu = to_bf16(randn(size_t(F) * E, rng, 0.05f));
    l.d = to_bf16(randn(size_t(E) * (F / 2), rng, 0.05f));
    l.g = randn(size_t(E), rng, 0.1f, 1.f);
  }
  Bf16Data wq = to_bf16(randn(size_t(333) * E, rng, 0.05f));
  std::vector<float> x0 = randn(size_t(E), rng);
  // Reference.
  std::vector<float> x = x0, xn(static_cast<size_t>(E)), y(static_cast<size_t>(F)), h(static_cast<size_t>(F / 2)),
      dx(static_cast<size_t>(E)), want(333);
  for (auto& l : layers) {
    cpu::rmsnorm(xn.data(), x.data(), view(l.g, {E}), 1e-5f, E);
    cpu::matvec(y.data(), bf16_view(l.gu, F, E), xn.data(), nullptr);
    std::vector<float> g(static_cast<size_t>(F / 2)), u(static_cast<size_t>(F / 2));
    for (int i = 0; i < F / 2; ++i) g[size_t(i)] = y[2 * size_t(i)], u[size_t(i)] = y[2 * size_t(i) + 1];
    cpu::swiglu(h.data(), g.data(), u.data(), F / 2);
    cpu::matvec(dx.data(), bf16_view(l.d, E, F / 2), h.data(), nullptr);
    cpu::add(x.data(), x.data(), dx.data(), E);
  }
  cpu::matvec(want.data(), bf16_view(wq, 333, E), x.data(), nullptr);
  // Device.
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> dw;
  std::vector<std::unique_ptr<DeviceArray<float>>> dg;
  for (auto& l : layers) {
    dw.push_back(std::make_unique<DeviceArray<uint16_t>>(l.gu.bits));
    dw.push_back(std::make_unique<DeviceArray<uint16_t>>(l.d.bits));
    dg.push_back(std::make_unique<DeviceArray<float>>(l.g));
  }
  DeviceArray<uint16_t> dq(wq.bits);
  DeviceArray<float> dx0(static_cast<size_t>(E)), dh(static_cast<size_t>(F / 2)), dout(333);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  bool early = false;  // MatvecArgs::trigger_at_start on every launch
  auto enqueue = [&] {
    for (size_t i = 0; i < layers.size(); ++i) {
      MatvecArgs gu;
      gu.w = reinterpret_cast<const __nv_bfloat16*>(dw[2 * i]->p);
      gu.n_rows = F;
      gu.n_cols = E;
      gu.x = dx0.p;
      gu.norm_w = dg[i]->p;
      gu.eps = 1e-5f;
      gu.out = dh.p;
      gu.mode = MatvecOut::SWIGLU;
      gu.trigger_at_start = early;
      cuda::matvec_splitk(cuda::Stream(s, true), gu);
      MatvecArgs d;
      d.w = reinterpret_cast<const __nv_bfloat16*>(dw[2 * i + 1]->p);
      d.n_rows = E;
      d.n_cols = F / 2;
      d.x = dh.p;
      d.out = dx0.p;
      d.mode = MatvecOut::ADD;
      d.trigger_at_start = early;
      cuda::matvec_splitk(cuda::Stream(s, true), d);
    }
    MatvecArgs q;
    q.w = reinterpret_cast<const __nv_bfloat16*>(dq.p);
    q.n_rows = 333;
    q.n_cols = E;
    q.x = dx0.p;
    q.out = dout.p;
    q.trigger_at_start = early;
    cuda::matvec_splitk(cuda::Stream(s, true), q);
  };
  for (auto [graph, trigger] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(cat(graph ? "graph" : "eager", trigger ? ", trigger_at_start" : ""));
    early = trigger;
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_CHECK(cudaMemcpy(dx0.p, x0.data(), x0.size() * 4, cudaMemcpyHostToDevice));
      dh.poison();
      dout.poison();
      CUDA_CHECK(cudaDeviceSynchronize());  // the copy and memsets ran on the legacy stream, which s does not wait for
      if (graph) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        enqueue();
        CUDA_CHECK(cudaStreamEndCapture(s, &g));
        CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        CUDA_CHECK(cudaGraphLaunch(ge, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      } else {
        enqueue();
      }
      CUDA_CHECK(cudaStreamSynchronize(s));
      CUDA_CHECK_LAUNCH();
      double err = rel_err(dout.download(), want);
      EXPECT_LT(err, 1e-4) << "rep " << rep;
    }
  }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace mk::gpu_test
