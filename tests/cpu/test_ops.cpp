// cpu:: reference ops against direct double-precision formulas on random inputs of odd sizes, for
// every weight dtype. Run: build/test_cpu --gtest_filter='Ops*'
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/ops.h"

namespace mk::cpu {
namespace {

// A weight tensor in `dtype` with random values, and the exact f32 values it holds.
struct TestTensor {
  std::vector<uint16_t> half;  // bf16 / f16 storage
  std::vector<float> f32;      // f32 storage, or the upcast values of `half`
  TensorView view;
};

TestTensor random_tensor(std::vector<int64_t> shape, DType dtype, std::mt19937& rng, float mean = 0.f,
                         float stddev = 1.f) {
  TestTensor t;
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.name = "test";
  std::normal_distribution<float> dist(mean, stddev);
  size_t n = size_t(t.view.numel());
  t.f32.resize(n);
  if (dtype != DType::F32) t.half.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float v = dist(rng);
    if (dtype == DType::BF16) {
      t.half[i] = f32_to_bf16(v);
      v = bf16_to_f32(t.half[i]);
    } else if (dtype == DType::F16) {
      t.half[i] = f32_to_f16(v);
      v = f16_to_f32(t.half[i]);
    }
    t.f32[i] = v;
  }
  t.view.data = dtype == DType::F32 ? static_cast<const void*>(t.f32.data()) : t.half.data();
  return t;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float stddev = 1.f) {
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ||a - b|| / ||b||
double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

const DType ALL_DTYPES[] = {DType::F32, DType::BF16, DType::F16};

TEST(Ops, EmbedCopiesTheRow) {
  std::mt19937 rng(1);
  for (DType dt : ALL_DTYPES) {
    auto table = random_tensor({37, 19}, dt, rng);
    std::vector<float> out(19, NAN);
    for (int32_t tok : {0, 5, 36}) {
      embed(out.data(), table.view, tok);
      for (int i = 0; i < 19; ++i) EXPECT_EQ(out[size_t(i)], table.f32[size_t(tok * 19 + i)]);
    }
  }
}

TEST(Ops, RmsnormMatchesFormula) {
  std::mt19937 rng(2);
  for (DType dt : ALL_DTYPES) {
    for (int n : {1, 7, 64, 203}) {
      auto w = random_tensor({n}, dt, rng, 1.f, 0.3f);
      auto x = random_vec(size_t(n), rng, 3.f);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      std::vector<double> ref(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) ref[size_t(i)] = w.f32[size_t(i)] * x[size_t(i)] * inv;
      std::vector<float> out(size_t(n), NAN);
      rmsnorm(out.data(), x.data(), w.view, 1e-5f, n);
      EXPECT_LT(rel_err(out, ref), 1e-6) << "n=" << n;
      rmsnorm(x.data(), x.data(), w.view, 1e-5f, n);  // in place
      EXPECT_EQ(x, out);
    }
  }
}

TEST(Ops, MatvecMatchesFormulaForEveryDtypeAndOddShape) {
  std::mt19937 rng(3);
  const std::pair<int, int> shapes[] = {{1, 1}, {17, 33}, {300, 129}, {1031, 72}, {5, 4099}};
  for (DType dt : ALL_DTYPES) {
    for (auto [rows, cols] : shapes) {
      auto w = random_tensor({rows, cols}, dt, rng, 0.f, 1.f / std::sqrt(float(cols)));
      auto bias = random_tensor({rows}, dt, rng);
      auto x = random_vec(size_t(cols), rng);
      for (bool with_bias : {false, true}) {
        std::vector<double> ref(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) {
          double s = with_bias ? bias.f32[size_t(r)] : 0.0;
          for (int c = 0; c < cols; ++c) s += double(w.f32[size_t(r) * cols + c]) * x[size_t(c)];
          ref[size_t(r)] = s;
        }
        std::vector<float> out(size_t(rows), NAN);
        matvec(out.data(), w.view, x.data(), with_bias ? &bias.view : nullptr);
        EXPECT_LT(rel_err(out, ref), 2e-6) << rows << "x" << cols << " dtype " << dtype_name(dt);
      }
    }
  }
}

TEST(Ops, MatvecRowsWritesOnlyItsRowsAndMatchesMatvecBitwise) {
  std::mt19937 rng(4);
  auto w = random_tensor({211, 97}, DType::BF16, rng);
  auto bias = random_tensor({211}, DType::BF16, rng);
  auto x = random_vec(97, rng);
  std::vector<float> full(211);
  matvec(full.data(), w.view, x.data(), &bias.view);
  for (auto [b, e] : {std::pair<int, int>{0, 211}, {0, 1}, {13, 77}, {210, 211}, {50, 50}}) {
    std::vector<float> part(211, NAN);
    matvec_rows(part.data(), w.view, x.data(), b, e, &bias.view);
    for (int r = 0; r < 211; ++r) {
      if (r >= b && r < e)
        EXPECT_EQ(part[size_t(r)], full[size_t(r)]) << r;
      else
        EXPECT_TRUE(std::isnan(part[size_t(r)])) << "row " << r << " outside [" << b << ", " << e << ") written";
    }
  }
}

TEST(Ops, RopeInvFreqDefaultMatchesFormula) {
  RopeConfig rc;
  rc.theta = 500000.f;
  for (int hd : {2, 32, 64, 128}) {
    std::vector<float> f;
    rope_inv_freq(f, rc, hd);
    ASSERT_EQ(f.size(), size_t(hd / 2));
    for (int i = 0; i < hd / 2; ++i) {
      double ref = 1.0 / std::pow(500000.0, 2.0 * i / hd);
      EXPECT_NEAR(f[size_t(i)], ref, 2e-6 * ref) << "hd " << hd << " i " << i;
    }
  }
}

// llama3 scaling, written from the published description (Llama 3.1 reference code) in double.
TEST(Ops, RopeInvFreqLlama3ScalesTheThreeBands) {
  RopeConfig rc;
  rc.theta = 10000.f;
  rc.type = "llama3";
  rc.factor = 8.f;
  rc.low_freq_factor = 1.f;
  rc.high_freq_factor = 4.f;
  rc.original_max_position = 64;
  const int hd = 64;
  std::vector<float> f;
  rope_inv_freq(f, rc, hd);
  int n_low = 0, n_mid = 0, n_high = 0;
  for (int i = 0; i < hd / 2; ++i) {
    double base = 1.0 / std::pow(10000.0, 2.0 * i / hd);
    double wavelen = 2 * M_PI / base, ref;
    if (wavelen < 64.0 / 4.0) {
      ref = base, n_high++;
    } else if (wavelen > 64.0 / 1.0) {
      ref = base / 8.0, n_low++;
    } else {
      double smooth = (64.0 / wavelen - 1.0) / (4.0 - 1.0);
      ref = (1 - smooth) * base / 8.0 + smooth * base, n_mid++;
    }
    EXPECT_NEAR(f[size_t(i)], ref, 1e-5 * ref) << "i " << i;
  }
  EXPECT_GT(n_low, 0);
  EXPECT_GT(n_mid, 0);
  EXPECT_GT(n_high, 0);
}

TEST(Ops, RopeRotatesHalfPairs) {
  std::mt19937 rng(5);
  for (int hd : {32, 64, 128}) {
    const int n_head = 3, pos = 37;
    RopeConfig rc;
    std::vector<float> inv;
    rope_inv_freq(inv, rc, hd);
    auto x = random_vec(size_t(n_head * hd), rng);
    auto y = x;
    rope(y.data(), n_head, hd, pos, inv.data());
    std::vector<double> ref(x.size());
    for (int h = 0; h < n_head; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        double a = double(float(pos) * inv[size_t(i)]);
        double x0 = x[size_t(h * hd + i)], x1 = x[size_t(h * hd + i + hd / 2)];
        ref[size_t(h * hd + i)] = x0 * std::cos(a) - x1 * std::sin(a);
        ref[size_t(h * hd + i + hd / 2)] = x1 * std::cos(a) + x0 * std::sin(a);
      }
    EXPECT_LT(rel_err(y, ref), 1e-6);
    auto z = x;
    rope(z.data(), n_head, hd, 0, inv.data());
    EXPECT_EQ(z, x) << "position 0 must be the identity";
  }
}

TEST(Ops, SwigluMatchesFormula) {
  std::mt19937 rng(6);
  auto g = random_vec(333, rng, 4.f), u = random_vec(333, rng);
  std::vector<float> out(333);
  swiglu(out.data(), g.data(), u.data(), 333);
  std::vector<double> ref(333);
  for (size_t i = 0; i < 333; ++i) ref[i] = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
  EXPECT_LT(rel_err(out, ref), 1e-6);
}

// Naive attention in double with the KV heads repeated per group (transformers' repeat_kv).
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int n_ctx, int n_head, int n_kv_head, int hd) {
  std::vector<double> out(size_t(n_head * hd), 0.0);
  for (int h = 0; h < n_head; ++h) {
    int kvh = h / (n_head / n_kv_head);
    std::vector<double> s(static_cast<size_t>(n_ctx));
    double mx = -1e300, sum = 0;
    for (int t = 0; t < n_ctx; ++t) {
      double d = 0;
      for (int i = 0; i < hd; ++i) d += double(q[size_t(h * hd + i)]) * k[size_t((t * n_kv_head + kvh) * hd + i)];
      s[size_t(t)] = d / std::sqrt(double(hd));
      mx = std::max(mx, s[size_t(t)]);
    }
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int t = 0; t < n_ctx; ++t)
      for (int i = 0; i < hd; ++i)
        out[size_t(h * hd + i)] += s[size_t(t)] / sum * v[size_t((t * n_kv_head + kvh) * hd + i)];
  }
  return out;
}

TEST(Ops, AttentionMatchesNaiveGqa) {
  std::mt19937 rng(7);
  struct Case { int n_ctx, n_head, n_kv_head, hd; };
  for (Case c : {Case{1, 4, 4, 32}, Case{7, 4, 1, 64}, Case{33, 6, 1, 64}, Case{100, 8, 2, 128}, Case{19, 12, 2, 16}}) {
    const int max_ctx = c.n_ctx + 5;  // the cache is longer than the context: rows past n_ctx are ignored
    auto q = random_vec(size_t(c.n_head * c.hd), rng, 1.5f);
    auto k = random_vec(size_t(max_ctx * c.n_kv_head * c.hd), rng, 1.5f);
    auto v = random_vec(size_t(max_ctx * c.n_kv_head * c.hd), rng);
    for (size_t i = size_t(c.n_ctx * c.n_kv_head * c.hd); i < k.size(); ++i) k[i] = v[i] = NAN;
    std::vector<float> out(q.size(), NAN);
    attention(out.data(), q.data(), k.data(), v.data(), c.n_ctx, c.n_head, c.n_kv_head, c.hd);
    EXPECT_LT(rel_err(out, attention_ref(q, k, v, c.n_ctx, c.n_head, c.n_kv_head, c.hd)), 2e-6)
        << "n_ctx " << c.n_ctx << " heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.hd;
  }
}

TEST(Ops, ArgmaxFirstMaxAndNan) {
  std::vector<float> x = {1.f, 3.f, -2.f, 3.f, 0.5f};
  EXPECT_EQ(argmax(x.data(), 5), 1);
  x[4] = 7.f;
  EXPECT_EQ(argmax(x.data(), 5), 4);
  x[2] = NAN;
  EXPECT_EQ(argmax(x.data(), 5), 2);
  std::mt19937 rng(8);
  auto r = random_vec(1001, rng);
  int32_t best = argmax(r.data(), 1001);
  for (float v : r) EXPECT_LE(v, r[size_t(best)]);
}

}  // namespace
}  // namespace mk::cpu
