// The host sampling loop that a device-sampled decode must equal (shared by the GPU backend tests): `tok` fed at
// pos, pos + 1, ... on a backend through forward(), each next token drawn by the host Sampler from its logits.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sampler.h"

namespace mk::gpu_test {

// dev[i] must be the loop's i-th token, drawn with p's rule from draw first_draw on. l: [n_vocab] scratch.
inline void expect_host_sampling_loop(Backend& b, const SamplingParams& p, uint64_t first_draw, int32_t tok, int pos,
                                      const std::vector<int32_t>& dev, std::vector<float>& l) {
  Sampler host(p);
  host.advance(first_draw);
  for (size_t i = 0; i < dev.size(); ++i) {
    ASSERT_TRUE(b.forward(std::vector<int32_t>{tok}, pos + int(i), l).ok());
    tok = host.sample(l, {});
    EXPECT_EQ(dev[i], tok) << "token " << i;
  }
}

}  // namespace mk::gpu_test
