// The layered backend's stop check on the device (CudaBackend::decode_greedy_until / decode_sample_until): the stop
// ids of a call, the state the decode graph's finish kernel keeps while it checks them, and the graphs that run a
// call's steps under a CUDA graph WHILE node, so that the steps after a stop id are never launched.
//
// One "until" graph per decode variant (CudaBackend::DecodeGraph), built when a call first has stop ids:
//   gate kernel -> WHILE(loop) { S decode steps chained with PDL } -> WHILE(tail) { 1 decode step }   (S > 1)
//   gate kernel -> WHILE(loop) { 1 decode step }                                                    (S = 1)
// S = CudaBackendOptions::stop_graph_steps. The gate sets both conditions from the state; the finish kernel of each
// body's last step sets them again: loop = not stopped and at least S steps left before this variant's end, tail =
// not stopped and at least one step left. A stop at step j of an S-step body lets the body's other steps run (their
// tokens, K/V rows and positions lie past the n produced and are ignored); S = 1 runs none. A body boundary has no
// PDL overlap (~9 us on the H200): with stop_prefetch the body's last finish kernel asks the L2 for the next body's
// first weights. Calls without stop ids never come here (the k-step graphs, unchanged).
// Tests: tests/gpu/test_backend_stop.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace mk::cuda {

constexpr int MAX_DECODE_STOP_IDS = 16;  // CudaBackend::max_stop_ids()
constexpr int MAX_DECODE_VARIANTS = 16;  // decode variants by sequence length (init makes ~log4(capacity / 256) + 1)

// Device memory, written by the host (one copy per call) before the call's graphs, read and updated by the finish
// kernels of the until graphs.
struct DecodeStop {
  int32_t n_ids;                      // stop ids in ids
  int32_t ids[MAX_DECODE_STOP_IDS];   // [n_ids] the call's stop ids
  int32_t stopped_at;                 // 0: no stop id chosen yet; else the tokens produced up to the first stop id
  int32_t end[MAX_DECODE_VARIANTS];   // [variant] StepState::n_generated at which that variant's steps end
};

// What a decode step's finish kernel does about stops (a kernel argument, fixed in the captured graph). Default
// (state null): nothing, as in the graphs without stop ids.
struct StopCheck {
  DecodeStop* state = nullptr;
  const int32_t* end = nullptr;          // &state->end[variant]
  cudaGraphConditionalHandle loop = 0;   // WHILE condition of the S-step body
  cudaGraphConditionalHandle tail = 0;   // WHILE condition of the 1-step tail (S > 1)
  int loop_steps = 1;                    // S
  int set_conditions = 0;                // 1: this step is its body's last (it sets loop and tail)
  // Body's last step, CudaBackendOptions::stop_prefetch: the L2 fetches these bytes (layer 0's QKV weights, the next
  // body's first kernel) while the WHILE node starts the next body, each finish block a share (grid finish kernel).
  const void* prefetch = nullptr;
  uint32_t prefetch_bytes = 0;           // a multiple of 16
};

// The until graphs of a backend (one per decode variant) and the device state they read; freed with the backend.
struct StopGraphs {
  DecodeStop* state = nullptr;           // device
  // Pinned host copies: the call's DecodeStop goes up and stopped_at comes back as asynchronous copies (pageable ones
  // cost ~10-20 us each in a call's host path).
  struct Host {
    DecodeStop up;
    int32_t stopped_at;
  };
  Host* host = nullptr;
  std::vector<cudaGraphExec_t> exec;     // [variant]
  bool body_pdl = true;                  // the bodies' kernels chain with PDL (false: instantiation refused it)
  StopGraphs() = default;
  StopGraphs(const StopGraphs&) = delete;
  StopGraphs& operator=(const StopGraphs&) = delete;
  ~StopGraphs() {
    for (cudaGraphExec_t e : exec)
      if (e) cudaGraphExecDestroy(e);
    if (state) cudaFree(state);
    if (host) cudaFreeHost(host);
  }
};

}  // namespace mk::cuda
