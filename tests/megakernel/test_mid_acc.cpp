// Tests of the mid-layer residual accumulator's words (isa.h mid_acc_word / mid_acc_value / mid_acc_count): the
// device adds them with L2 atomics in whatever order the contributions land, so the sum must not depend on the
// order, must count its contributions exactly, and must stay within the fixed-point resolution of the float sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "megakernel/isa.h"

namespace mk::megakernel {
namespace {

unsigned long long sum_words(const std::vector<float>& v) {
  unsigned long long w = 0;
  for (float x : v) w += mid_acc_word(x);  // modulo 2^64, as the device's red.add.u64
  return w;
}

TEST(MidAcc, CountsContributionsAndSumsInAnyOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int n : {1, 2, 9, 33, 255}) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng) * (n % 2 ? 1.f : 100.f);
    const unsigned long long w = sum_words(v);
    EXPECT_EQ(mid_acc_count(w), unsigned(n) & 0xffu);
    for (int shuffle = 0; shuffle < 4; ++shuffle) {
      std::shuffle(v.begin(), v.end(), rng);
      EXPECT_EQ(sum_words(v), w) << n << " contributions";
    }
    double exact = 0;
    for (float x : v) exact += double(x);
    // Each contribution rounds to 2^-MID_ACC_FRAC (half a unit at most), the float result to 24 bits.
    const double tol = n * std::ldexp(0.5, -MID_ACC_FRAC) + std::fabs(exact) * 0x1p-24;
    EXPECT_LE(std::fabs(double(mid_acc_value(w)) - exact), tol) << n << " contributions";
  }
}

TEST(MidAcc, ExactForRepresentableValuesAndSignedSums) {
  EXPECT_EQ(mid_acc_value(sum_words({-1.5f, 0.25f})), -1.25f);
  EXPECT_EQ(mid_acc_value(sum_words({-3.f})), -3.f);
  EXPECT_EQ(mid_acc_value(sum_words({0x1p-28f, 0x1p-28f, -0x1p-27f})), 0.f);
  EXPECT_EQ(mid_acc_value(0), 0.f);
  EXPECT_EQ(mid_acc_count(0), 0u);  // a cleared word: no contribution yet
}

TEST(MidAcc, ClampsSoThatTheFullCountCannotOverflow) {
  EXPECT_EQ(mid_acc_word(1e30f), mid_acc_word(MID_ACC_MAX));
  EXPECT_EQ(mid_acc_word(-INFINITY), mid_acc_word(-MID_ACC_MAX));
  std::vector<float> big(255, MID_ACC_MAX), neg(255, -MID_ACC_MAX);
  const unsigned long long wb = sum_words(big), wn = sum_words(neg);
  EXPECT_EQ(mid_acc_count(wb), 255u);
  EXPECT_EQ(mid_acc_count(wn), 255u);
  EXPECT_EQ(mid_acc_value(wb), 255.f * MID_ACC_MAX);
  EXPECT_EQ(mid_acc_value(wn), -255.f * MID_ACC_MAX);
}

}  // namespace
}  // namespace mk::megakernel
