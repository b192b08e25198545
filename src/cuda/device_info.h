// The GPU we run on: checked once before any work (present, sm_90, enough memory), so that a missing or
// unsuitable GPU is a clear error, never a crash in the middle of a step.
#pragma once
#include <cstddef>
#include <string>

#include "core/status.h"

namespace mk::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0, free_memory = 0;
  size_t smem_per_block_optin = 0;  // largest dynamic shared memory a block may ask for
  size_t l2_bytes = 0;
};

// Fails with a message a user can act on when no CUDA device is usable or it is not a Hopper (sm_90) GPU.
Expected<DeviceInfo> query_device(int index = 0);

}  // namespace mk::cuda
