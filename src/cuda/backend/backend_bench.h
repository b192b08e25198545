// Timing of the layered CUDA backend for `megakernel bench`: prefill of given prompt lengths and batch-1 greedy (or
// sampled on the device) decode at given context lengths (median ms/token over n_tokens x repeats, CUDA events, after warm-up).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/backend/cuda_backend.h"

namespace mk::cuda {

struct PrefillTiming {
  int n_tokens = 0;
  double ms = 0;  // median over repeats, host enqueue included
};

struct DecodeTiming {
  int context = 0;           // cached positions before the first timed token
  bool random_context = false;  // KV filled with random values instead of a real prefill
  double ms_median = 0;      // median of per-token times (an event pair around each graph replay)
  double ms_mean = 0;        // one event pair around n_tokens back-to-back replays, / n_tokens (median over repeats)
  double bytes_per_token = 0;  // weights + KV read
};

struct BackendTiming {
  std::vector<PrefillTiming> prefill;
  std::vector<DecodeTiming> decode;
};

// Contexts above max_real_prefill positions use set_random_context instead of a real prefill. sampling: the decode
// steps draw their tokens on the device (CudaBackend::decode_sample's draw) instead of taking the argmax.
Expected<BackendTiming> time_backend(CudaBackend& b, const std::vector<int>& prefill_lengths,
                                     const std::vector<int>& contexts, int n_tokens, int repeats,
                                     double weight_bytes_per_token, int max_real_prefill = 1024,
                                     const SamplingParams& sampling = {});

}  // namespace mk::cuda
