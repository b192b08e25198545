// test_gpu: the GPU tests (kernels vs the CPU reference, the CUDA backend vs the CPU backend). Run on a machine
// with an sm_90 GPU (scripts/gpu_round.sh). Without one it prints that every test was SKIPPED and why, and
// exits 0 — unless MK_REQUIRE_GPU=1 (set by the GPU-round scripts), where a missing GPU is a failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda/device_info.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto dev = mk::cuda::query_device();
  if (!dev) {
    const char* req = std::getenv("MK_REQUIRE_GPU");
    const bool required = req && std::strcmp(req, "0") != 0;
    std::fprintf(stderr, "test_gpu: %s: %s\n", required ? "FAILED (MK_REQUIRE_GPU is set)" : "SKIPPED, all tests",
                 dev.message().c_str());
    return required ? 1 : 0;
  }
  std::printf("test_gpu on %s (%d SMs, %.1f GiB)\n", dev->name.c_str(), dev->sm_count,
              double(dev->total_memory) / (1 << 30));
  return RUN_ALL_TESTS();
}
