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
  double ms = 0;  // median over repeats, host enqueue included (graph replays once the length recurs)
  double eager_ms = 0;  // the length's second use: eager launches, as a prompt length seen for the first time
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

// The device stop check (decode_*_until, decode_stop.h) against the same calls without stop ids, whole calls of
// n_tokens from `context` (one event pair around each call, host sync included; median over repeats, interleaved).
struct StopTiming {
  int context = 0;
  int n_tokens = 0;
  double ms_plain = 0;       // per token: decode_greedy / decode_sample (no stop ids, the graphs of replay_decode_k)
  double ms_stops = 0;       // per token: the until graphs with 2 stop ids that never occur (all n_tokens steps)
  double ms_stop_first = 0;  // per call: n_tokens asked for, the first token is a stop id (1 produced)
  double ms_one = 0;         // per call: one token asked for, no stop ids
};
Expected<StopTiming> time_stop_calls(CudaBackend& b, int context, int n_tokens, int repeats,
                                     const SamplingParams& sampling = {}, int max_real_prefill = 1024);

// Contexts above max_real_prefill positions use set_random_context instead of a real prefill. sampling: the decode
// steps draw their tokens on the device (CudaBackend::decode_sample's draw) instead of taking the argmax.
Expected<BackendTiming> time_backend(CudaBackend& b, const std::vector<int>& prefill_lengths,
                                     const std::vector<int>& contexts, int n_tokens, int repeats,
                                     double weight_bytes_per_token, int max_real_prefill = 1024,
                                     const SamplingParams& sampling = {});

}  // namespace mk::cuda
