// test_gpu: the GPU tests (kernels vs the CPU reference, the CUDA backend vs the CPU backend). Run on a machine
// with an sm_90 GPU (scripts/gpu_round.sh); without one it says so and fails rather than skipping silently.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/device_info.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto dev = mk::cuda::query_device();
  if (!dev) {
    std::fprintf(stderr, "test_gpu: %s\n", dev.message().c_str());
    return 1;
  }
  std::printf("test_gpu on %s (%d SMs, %.1f GiB)\n", dev->name.c_str(), dev->sm_count,
              double(dev->total_memory) / (1 << 30));
  return RUN_ALL_TESTS();
}
