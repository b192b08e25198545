// Device side of the layered backend's stop check (decode_stop.h): what the decode step's finish kernel (steps.cu)
// does with a StopCheck, and the conditions of the until graphs' WHILE nodes.
#pragma once
#include <climits>

#include "cuda/backend/decode_stop.h"

namespace mk::cuda {

// DecodeStop::stopped_at before a stop id is chosen (atomicMin keeps the first stop's count).
constexpr int32_t NOT_STOPPED = INT32_MAX;

// The host's part of DecodeStop, copied to shared memory by thread 0 before the finish kernel's PDL wait: the host
// wrote it before the call's first graph and no kernel writes it, so it needs no wait (its loads overlap the wait).
struct StopShared {
  int32_t n_ids;
  int32_t end;
  int32_t ids[MAX_DECODE_STOP_IDS];
};

__device__ __forceinline__ void stop_preload(const StopCheck& c, StopShared& s) {
  if (threadIdx.x != 0 || c.state == nullptr) return;
  s.n_ids = c.state->n_ids;
  s.end = *c.end;
#pragma unroll
  for (int i = 0; i < MAX_DECODE_STOP_IDS; ++i) s.ids[i] = c.state->ids[i];
}

// The WHILE conditions after n_generated tokens: the S-step body runs again while at least S steps of this variant
// remain, the 1-step tail while one does, neither after a stop. One thread, one call per step (the steps of a graph
// are serialised, so the calls never race, as cudaGraphSetConditional requires).
__device__ __forceinline__ void set_stop_conditions(const StopCheck& c, int32_t end, int32_t n_generated, bool go) {
  const int32_t left = end - n_generated;
  cudaGraphSetConditional(c.loop, go && left >= c.loop_steps ? 1u : 0u);
  if (c.loop_steps > 1) cudaGraphSetConditional(c.tail, go && left >= 1 ? 1u : 0u);
}

// Thread 0 of the block that ends the step, once the step's token tok is the n_generated-th of the call.
__device__ __forceinline__ void stop_after_token(const StopCheck& c, const StopShared& s, int32_t tok,
                                                 int32_t n_generated) {
  if (c.state == nullptr) return;
  bool hit = false;
  for (int i = 0; i < s.n_ids; ++i) hit |= s.ids[i] == tok;
  // A reduction, not a load: no latency on the step's path. The first stop of the call has the smallest count.
  if (hit) atomicMin(&c.state->stopped_at, n_generated);
  if (!c.set_conditions) return;
  // One-step bodies: an earlier stop ended the loop, so only this step's can matter. Longer bodies: a stop at an
  // earlier step of this body (its kernels completed: the PDL waits chain) is in stopped_at.
  const bool go =
      !hit && (c.loop_steps == 1 || *reinterpret_cast<volatile int32_t*>(&c.state->stopped_at) == NOT_STOPPED);
  set_stop_conditions(c, s.end, n_generated, go);
}

// This block's share of StopCheck::prefetch, in 16 KB bulk requests (fire and forget: nothing waits for them). The
// next body's first kernel cannot overlap this one (no PDL across a WHILE boundary), so its weights come from L2.
__device__ __forceinline__ void stop_prefetch_share(const StopCheck& c) {
  if (c.prefetch == nullptr || threadIdx.x != 0) return;
  const uint32_t share = (c.prefetch_bytes / gridDim.x + 15) / 16 * 16;
  const uint32_t b0 = share * blockIdx.x, b1 = b0 + share < c.prefetch_bytes ? b0 + share : c.prefetch_bytes;
  const unsigned char* src = static_cast<const unsigned char*>(c.prefetch);
  for (uint32_t b = b0; b < b1; b += 16384)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src + b), "r"(b1 - b < 16384 ? b1 - b : 16384u)
                 : "memory");
}

}  // namespace mk::cuda
