// Layered kernels (src/cuda/ops/) against the CPU reference (src/cpu/ops.h) on random data, poisoned outputs,
// odd sizes. Bounds: exact where the op only moves bits (embed); 1e-2 where the output is rounded to bf16
// (rounding alone is <= 2^-9 relative per element); 2e-5 for f32 outputs of f32 arithmetic.
// Run: test_gpu --gtest_filter='Ops*'
#include <algorithm>
#include <numeric>

#include "cpu/ops.h"
#include "cuda/ops/attention_simple.h"
#include "cuda/ops/embed.h"
#include "cuda/ops/gemm.h"
#include "cuda/ops/rmsnorm.h"
#include "cuda/ops/rope.h"
#include "cuda/ops/swiglu.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {
namespace {

using bf16 = __nv_bfloat16;
const cuda::Stream S(nullptr, true);

TEST(Ops, EmbedCopiesRowsExactlyAndMarksBadTokens) {
  const int V = 37, E = 24;
  std::mt19937 rng(1);
  Bf16Data table = to_bf16(randn(size_t(V) * E, rng));
  std::vector<int32_t> tokens = {5, 0, 36, 5, 17, -1, 37};
  DeviceArray<uint16_t> dt(table.bits);
  DeviceArray<int32_t> dtok(tokens);
  DeviceArray<float> out(tokens.size() * E);
  out.poison();
  cuda::embed(S, out.p, reinterpret_cast<bf16*>(dt.p), dtok.p, int(tokens.size()), E, V);
  auto got = out.download();
  const TensorView tv = bf16_view(table, V, E);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= V) {
      for (int i = 0; i < E; ++i) EXPECT_TRUE(std::isnan(got[t * E + size_t(i)]));
      continue;
    }
    std::vector<float> want(E);
    cpu::embed(want.data(), tv, tokens[t]);
    for (int i = 0; i < E; ++i) EXPECT_EQ(got[t * E + size_t(i)], want[size_t(i)]);
  }
}

TEST(Ops, RmsnormRowsMatchesCpu) {
  for (auto [n, rows] : {std::pair{8, 1}, {200, 5}, {2048, 3}, {4104, 2}}) {
    std::mt19937 rng(uint32_t(n + rows));
    std::vector<float> x = randn(size_t(n) * rows, rng, 2.f, 0.5f), w = randn(size_t(n), rng, 0.1f, 1.f);
    DeviceArray<float> dx(x), dw(w);
    DeviceArray<uint16_t> out(size_t(n) * rows);
    out.poison();
    cuda::rmsnorm(S, reinterpret_cast<bf16*>(out.p), dx.p, dw.p, 1e-6f, n, rows, n);
    std::vector<float> want(x.size());
    for (int r = 0; r < rows; ++r)
      cpu::rmsnorm(want.data() + size_t(r) * n, x.data() + size_t(r) * n, view(w, {n}), 1e-6f, n);
    EXPECT_LT(rel_err(bf16_bits_to_f32(out.download()), want), 1e-2) << n << " x " << rows;
  }
}

TEST(Ops, SwigluRowsMatchesCpu) {
  for (auto [n_ff, rows] : {std::pair{2, 1}, {344, 3}, {8192, 2}}) {
    std::mt19937 rng(static_cast<uint32_t>(n_ff));
    std::vector<float> gu = randn(size_t(2 * n_ff) * rows, rng, 3.f);
    DeviceArray<float> dgu(gu);
    DeviceArray<uint16_t> out(size_t(n_ff) * rows);
    out.poison();
    cuda::swiglu(S, reinterpret_cast<bf16*>(out.p), dgu.p, n_ff, rows);
    std::vector<float> want(size_t(n_ff) * rows), g(static_cast<size_t>(n_ff)), u(static_cast<size_t>(n_ff));
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < n_ff; ++i) {
        g[size_t(i)] = gu[(size_t(r) * n_ff + i) * 2];
        u[size_t(i)] = gu[(size_t(r) * n_ff + i) * 2 + 1];
      }
      cpu::swiglu(want.data() + size_t(r) * n_ff, g.data(), u.data(), n_ff);
    }
    EXPECT_LT(rel_err(bf16_bits_to_f32(out.download()), want), 1e-2) << n_ff;
  }
}

// A paged cache whose block table is a permutation, so that paging mistakes show.
struct PagedCache {
  int n_blocks, n_kv, D;
  std::vector<int32_t> table;
  DeviceArray<uint16_t> k, v;
  DeviceArray<int32_t> dtable;
  PagedCache(int blocks, int n_kv_, int D_, std::mt19937& rng)
      : n_blocks(blocks), n_kv(n_kv_), D(D_), table(static_cast<size_t>(blocks)),
        k(size_t(blocks) * 64 * n_kv_ * D_), v(size_t(blocks) * 64 * n_kv_ * D_), dtable(static_cast<size_t>(blocks)) {
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    dtable.upload(table);
  }
  cuda::KvCacheView view() const {
    return {reinterpret_cast<bf16*>(k.p), reinterpret_cast<bf16*>(v.p), n_blocks, 64, n_kv, D};
  }
  size_t row(int pos, int h) const { return ((size_t(table[size_t(pos / 64)]) * 64 + pos % 64) * n_kv + h) * D; }
};

TEST(Ops, RopeQkvMatchesCpuNormRopeAndWritesPagedCache) {
  struct Cfg {
    int n_head, n_kv, D;
    bool bias, qk_norm;
    const char* rope;
    bool pair_rows;
  };
  for (const Cfg& c : {Cfg{4, 2, 64, false, false, "llama3", false}, Cfg{6, 1, 64, true, false, "default", false},
                       Cfg{8, 2, 128, false, true, "default", false}, Cfg{2, 2, 32, false, true, "llama3", false},
                       Cfg{6, 1, 64, true, false, "default", true}, Cfg{8, 2, 128, true, true, "llama3", true}}) {
    SCOPED_TRACE(cat(c.n_head, "/", c.n_kv, " heads, D ", c.D, c.bias ? " bias" : "", c.qk_norm ? " qk_norm" : "",
                     " ", c.rope, c.pair_rows ? " pair_rows" : ""));
    std::mt19937 rng(uint32_t(c.D * 7 + c.n_head));
    const int T = 3, pos0 = 62, Q = c.n_head * c.D, KV = c.n_kv * c.D, R = Q + 2 * KV;  // crosses a block edge
    RopeConfig rc;
    rc.theta = 500000.f;
    rc.type = c.rope;
    rc.factor = 32.f;
    std::vector<float> inv_freq;
    cpu::rope_inv_freq(inv_freq, rc, c.D);
    std::vector<float> qkv = randn(size_t(T) * R, rng), bias = randn(size_t(R), rng, 0.3f);
    std::vector<float> qn = randn(size_t(c.D), rng, 0.1f, 1.f), kn = randn(size_t(c.D), rng, 0.1f, 1.f);
    PagedCache cache(3, c.n_kv, c.D, rng);
    cache.k.poison();
    cache.v.poison();
    // pair_rows: the device sees every head in rope-pair order (row 2j = dim j, 2j + 1 = dim j + D/2).
    std::vector<float> qkv_dev = qkv, bias_dev = bias;
    if (c.pair_rows)
      for (int col = 0; col < R; ++col) {
        int h = col / c.D, d = col % c.D, pc = h * c.D + (d < c.D / 2 ? 2 * d : 2 * (d - c.D / 2) + 1);
        bias_dev[size_t(pc)] = bias[size_t(col)];
        for (int t = 0; t < T; ++t) qkv_dev[size_t(t) * R + pc] = qkv[size_t(t) * R + col];
      }
    DeviceArray<float> dqkv(qkv_dev), dbias(bias_dev), dqn(qn), dkn(kn), dfreq(inv_freq);
    DeviceArray<int32_t> dpos(std::vector<int32_t>{pos0});
    DeviceArray<uint16_t> q_out(size_t(T) * Q);
    q_out.poison();
    cuda::RopeQkvArgs a;
    a.qkv = dqkv.p;
    a.pair_rows = c.pair_rows;
    a.bias = c.bias ? dbias.p : nullptr;
    a.q_norm = c.qk_norm ? dqn.p : nullptr;
    a.k_norm = c.qk_norm ? dkn.p : nullptr;
    a.eps = 1e-6f;
    a.inv_freq = dfreq.p;
    a.pos0 = dpos.p;
    a.n_tokens = T;
    a.n_head = c.n_head;
    a.n_kv_head = c.n_kv;
    a.head_dim = c.D;
    a.q_out = reinterpret_cast<bf16*>(q_out.p);
    a.kv = cache.view();
    a.block_table = cache.dtable.p;
    a.max_positions = 3 * 64;
    cuda::rope_qkv(S, a);
    CUDA_CHECK_LAUNCH();
    auto got_q = bf16_bits_to_f32(q_out.download());
    auto got_k = bf16_bits_to_f32(cache.k.download()), got_v = bf16_bits_to_f32(cache.v.download());
    std::vector<float> want_q, g_q, want_k, g_k, want_v, g_v;
    for (int t = 0; t < T; ++t) {
      std::vector<float> row(qkv.begin() + t * R, qkv.begin() + (t + 1) * R);
      if (c.bias) cpu::add(row.data(), row.data(), bias.data(), R);
      float *q = row.data(), *k = q + Q, *v = k + KV;
      if (c.qk_norm) {
        for (int h = 0; h < c.n_head; ++h) cpu::rmsnorm(q + h * c.D, q + h * c.D, view(qn, {c.D}), 1e-6f, c.D);
        for (int h = 0; h < c.n_kv; ++h) cpu::rmsnorm(k + h * c.D, k + h * c.D, view(kn, {c.D}), 1e-6f, c.D);
      }
      cpu::rope(q, c.n_head, c.D, pos0 + t, inv_freq.data());
      cpu::rope(k, c.n_kv, c.D, pos0 + t, inv_freq.data());
      want_q.insert(want_q.end(), q, q + Q);
      for (int h = 0; h < c.n_kv; ++h) {
        size_t off = cache.row(pos0 + t, h);
        want_k.insert(want_k.end(), k + h * c.D, k + (h + 1) * c.D);
        want_v.insert(want_v.end(), v + h * c.D, v + (h + 1) * c.D);
        g_k.insert(g_k.end(), got_k.begin() + off, got_k.begin() + off + c.D);
        g_v.insert(g_v.end(), got_v.begin() + off, got_v.begin() + off + c.D);
      }
    }
    EXPECT_LT(rel_err(got_q, want_q), 1e-2);
    EXPECT_LT(rel_err(g_k, want_k), 1e-2);
    EXPECT_LT(rel_err(g_v, want_v), 1e-2);
  }
}

TEST(Ops, AttentionSimpleMatchesCpuAttention) {
  for (auto [n_head, n_kv, D, kv_len, T] : {std::tuple{4, 2, 64, 70, 3}, {2, 2, 32, 1, 1}, {8, 1, 128, 129, 1},
                                            {6, 2, 64, 150, 150}}) {
    SCOPED_TRACE(cat(n_head, "/", n_kv, " D ", D, " kv_len ", kv_len, " T ", T));
    std::mt19937 rng(uint32_t(kv_len * 3 + D));
    PagedCache cache((kv_len + 63) / 64, n_kv, D, rng);
    Bf16Data kc = to_bf16(randn(cache.k.n, rng)), vc = to_bf16(randn(cache.v.n, rng));
    cache.k.upload(kc.bits);
    cache.v.upload(vc.bits);
    Bf16Data q = to_bf16(randn(size_t(T) * n_head * D, rng));
    DeviceArray<uint16_t> dq(q.bits), out(q.bits.size());
    DeviceArray<int32_t> dlen(std::vector<int32_t>{kv_len});
    out.poison();
    cuda::attention_simple(S, reinterpret_cast<bf16*>(out.p), reinterpret_cast<bf16*>(dq.p), cache.view(),
                           cache.dtable.p, dlen.p, T, n_head, 0.f);
    CUDA_CHECK_LAUNCH();
    // Contiguous f32 caches [kv_len, n_kv, D] for the reference.
    std::vector<float> kf, vf;
    for (int p = 0; p < kv_len; ++p)
      for (int h = 0; h < n_kv; ++h) {
        kf.insert(kf.end(), kc.f.begin() + cache.row(p, h), kc.f.begin() + cache.row(p, h) + D);
        vf.insert(vf.end(), vc.f.begin() + cache.row(p, h), vc.f.begin() + cache.row(p, h) + D);
      }
    std::vector<float> want(q.f.size());
    for (int t = 0; t < T; ++t)
      cpu::attention(want.data() + size_t(t) * n_head * D, q.f.data() + size_t(t) * n_head * D, kf.data(), vf.data(),
                     kv_len - T + t + 1, n_head, n_kv, D);
    EXPECT_LT(rel_err(bf16_bits_to_f32(out.download()), want), 1e-2);
  }
}

TEST(Ops, GemmMatchesCpuMatvecPerRow) {
  auto g = cuda::Gemm::create();
  ASSERT_TRUE(g) << g.message();
  for (auto [M, N, K] : {std::tuple{1, 8, 8}, {5, 72, 200}, {33, 1001, 264}, {128, 512, 2048}}) {
    SCOPED_TRACE(cat(M, "x", N, "x", K));
    std::mt19937 rng(uint32_t(M + N + K));
    Bf16Data x = to_bf16(randn(size_t(M) * K, rng)), w = to_bf16(randn(size_t(N) * K, rng, 0.05f));
    std::vector<float> y0 = randn(size_t(M) * N, rng);
    DeviceArray<uint16_t> dx(x.bits), dw(w.bits), ybf(size_t(M) * N);
    DeviceArray<float> y(y0), yst(size_t(M) * N);
    yst.poison();
    ybf.poison();
    auto* xp = reinterpret_cast<bf16*>(dx.p);
    auto* wp = reinterpret_cast<bf16*>(dw.p);
    (*g)->run(nullptr, yst.p, DType::F32, xp, wp, M, N, K);
    (*g)->run(nullptr, y.p, DType::F32, xp, wp, M, N, K, 1.f);  // accumulate into y0
    (*g)->run(nullptr, ybf.p, DType::BF16, xp, wp, M, N, K);
    TensorView wv = view(w.f, {N, K});
    std::vector<float> want(size_t(M) * N), want_acc(size_t(M) * N);
    for (int m = 0; m < M; ++m) cpu::matvec(want.data() + size_t(m) * N, wv, x.f.data() + size_t(m) * K);
    cpu::add(want_acc.data(), want.data(), y0.data(), M * N);
    EXPECT_LT(rel_err(yst.download(), want), 2e-5);
    EXPECT_LT(rel_err(y.download(), want_acc), 2e-5);
    EXPECT_LT(rel_err(bf16_bits_to_f32(ybf.download()), want), 1e-2);
  }
}

// prepare() chooses one algorithm per power-of-two bucket of M: every M of a bucket reuses it (or asks the heuristic
// when it does not fit), so M between the buckets must be right too, with and without accumulation.
TEST(Ops, GemmBucketsMatchCpu) {
  auto g = cuda::Gemm::create();
  ASSERT_TRUE(g) << g.message();
  const int max_m = 100, N = 520, K = 2048;
  std::mt19937 rng(7);
  Bf16Data x = to_bf16(randn(size_t(max_m) * K, rng)), w = to_bf16(randn(size_t(N) * K, rng, 0.05f));
  DeviceArray<uint16_t> dx(x.bits), dw(w.bits);
  DeviceArray<float> y(size_t(max_m) * N);
  auto* xp = reinterpret_cast<bf16*>(dx.p);
  auto* wp = reinterpret_cast<bf16*>(dw.p);
  (*g)->prepare(nullptr, y.p, DType::F32, xp, wp, max_m, N, K);
  (*g)->prepare(nullptr, y.p, DType::F32, xp, wp, max_m, N, K, 1.f);
  TensorView wv = view(w.f, {N, K});
  for (int M : {1, 3, 16, 32, 37, 64, 100}) {
    SCOPED_TRACE(cat("M ", M));
    std::vector<float> y0 = randn(size_t(M) * N, rng), want(size_t(M) * N), want_acc(size_t(M) * N);
    DeviceArray<float> yst(size_t(M) * N), yacc(y0);
    yst.poison();
    (*g)->run(nullptr, yst.p, DType::F32, xp, wp, M, N, K);
    (*g)->run(nullptr, yacc.p, DType::F32, xp, wp, M, N, K, 1.f);
    for (int m = 0; m < M; ++m) cpu::matvec(want.data() + size_t(m) * N, wv, x.f.data() + size_t(m) * K);
    cpu::add(want_acc.data(), want.data(), y0.data(), M * N);
    EXPECT_LT(rel_err(yst.download(), want), 2e-5);
    EXPECT_LT(rel_err(yacc.download(), want_acc), 2e-5);
  }
}

}  // namespace
}  // namespace mk::gpu_test
