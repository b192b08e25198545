// The on-device sampler (src/cuda/ops/sample.cuh) against the host Sampler (runtime/sampler.cpp) on random logits:
// the same id for every (temperature, min-p, seed, draw) from one block and from grids of 7 and 64 blocks, at
// vocabulary sizes from tiny to Llama 3's, with NaN and
// -inf entries and peaked and flat distributions. The host rule and its statistics are tested in
// tests/runtime/test_sampler.cpp; here only the equality. Run: test_gpu --gtest_filter='Sample*'
#include "cuda/ops/sample.h"
#include "gpu_test_util.h"
#include "runtime/sampler.h"

namespace mk::gpu_test {
namespace {

TEST(Sample, DeviceDrawsEqualHostSampler) {
  std::mt19937 rng(17);
  DeviceArray<int32_t> out(1);
  int n_draws = 0;
  for (int V : {1, 7, 1000, 50257, 128256}) {
    for (float sigma : {0.5f, 3.f, 12.f}) {  // flat .. peaked
      std::vector<float> logits = randn(size_t(V), rng, sigma);
      if (V > 10) logits[size_t(V / 3)] = NAN, logits[size_t(V / 2)] = -INFINITY, logits[size_t(V - 1)] = INFINITY;
      DeviceArray<float> d(logits);
      for (float T : {0.3f, 1.f, 2.5f}) {
        for (float min_p : {0.f, 0.05f}) {
          for (uint64_t seed : {0ull, 99ull}) {
            for (uint64_t draw : {0ull, 1ull, 1000003ull}) {
              SCOPED_TRACE(cat("V ", V, " sigma ", sigma, " T ", T, " min_p ", min_p, " seed ", seed, " draw ", draw));
              SamplingParams p;
              p.temperature = T;
              p.min_p = min_p;
              p.seed = seed;
              Sampler host(p);
              host.advance(draw);
              std::vector<float> h = logits;
              const int32_t want = host.sample(h, {});
              for (int blocks : {1, 7, 64}) {  // block_sample, grid_sample
                out.poison();
                cuda::sample_token(cuda::Stream(nullptr, false), d.p, V, T, min_p, seed, draw, out.p, blocks);
                EXPECT_EQ(out.download()[0], want) << blocks << " blocks";
                ++n_draws;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(n_draws, 5 * 3 * 3 * 2 * 2 * 3 * 3);
}

TEST(Sample, NoFiniteLogitIsMinusOne) {
  DeviceArray<float> d(std::vector<float>{NAN, -INFINITY, INFINITY, NAN});
  DeviceArray<int32_t> out(1);
  for (int blocks : {1, 3}) {
    out.poison();
    cuda::sample_token(cuda::Stream(nullptr, false), d.p, 4, 1.f, 0.f, 5, 0, out.p, blocks);
    EXPECT_EQ(out.download()[0], -1) << blocks << " blocks";
  }
}

}  // namespace
}  // namespace mk::gpu_test
