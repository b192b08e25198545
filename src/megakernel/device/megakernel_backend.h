// MegakernelBackend: the batch-1 decode step as one persistent kernel (interpreter.cu) behind the
// Backend interface. Weights in the layered path's device layout (cuda/backend/device_weights.h), KV
// cache in its paged layout (cuda/backend/kv_cache.h, block size 64, identity block table).
// Prefill runs token by token through the megakernel itself (one launch per token).
// Tests: tests/gpu/test_megakernel.cu. Benchmark: bench/megakernel_decode.cpp (figures in bench/RESULTS.md).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/kv_cache.h"
#include "megakernel/model.h"
#include "megakernel/schedule.h"
#include "runtime/backend.h"

namespace mk::megakernel {

struct MegakernelOptions {
  int n_sm = 0;            // persistent blocks; 0 = every SM of the device
  int attn_chunk_len = 0;  // schedule: positions per attention chunk (0 = choose)
  int slices_per_sm = 1;   // schedule: instructions per SM per matrix stage
  double watchdog_s = 2.0; // a dependency wait longer than this fails the step instead of hanging
  int prefetch_bytes = 0;  // L2 prefetch of the next instruction's weights after publishing (0 = off)
};

class MegakernelBackend final : public Backend {
 public:
  // Refuses (with the reason) what the interpreter cannot run: head_dim other than 64/128, sizes
  // not multiples of 8, too little shared memory, no cooperative launch.
  static Expected<std::unique_ptr<MegakernelBackend>> create(const ModelConfig& config, cuda::DeviceWeights weights,
                                                             int max_context, const MegakernelOptions& opt = {});
  ~MegakernelBackend() override;

  const char* name() const override { return "megakernel"; }
  Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) override;
  void truncate(int pos) override;
  int max_context() const override { return max_context_; }
  const ModelConfig& config() const override { return config_; }

  // Greedy decode on the device: feeds `token` at `pos`, then each argmax back in, steps_per_launch
  // steps per launch (the host only launches); out[i] is the i-th chosen token.
  Status generate_greedy(int32_t token, int pos, std::span<int32_t> out, int steps_per_launch);

  // --- for benchmarks ---
  // Enqueues one launch of n_steps greedy steps starting at pos (token from tokens[0] on the device,
  // or `token` when >= 0). Asynchronous; check_error() synchronises and reports a watchdog.
  Status enqueue(int32_t token, int pos, int n_steps);
  Status check_error();
  Status set_random_context(int n);  // pretend positions [0, n) are cached with random K/V
  const Schedule& schedule() const { return schedule_; }
  cudaStream_t stream() const { return stream_; }
  size_t weight_bytes() const { return weights_.bytes; }
  void set_prefetch_bytes(int n) { prefetch_bytes_ = n; }

 private:
  MegakernelBackend() = default;
  Status init(const MegakernelOptions& opt);

  ModelConfig config_;
  cuda::DeviceWeights weights_;
  cuda::DeviceKvCache kv_;
  Schedule schedule_;
  int max_context_ = 0;
  int n_cached_ = 0;
  int n_sm_ = 0;
  uint32_t epoch_ = 0;
  bool broken_ = false;  // a watchdog fired: counters are inconsistent
  long long watchdog_cycles_ = 0;
  cudaStream_t stream_ = nullptr;
  // Device buffers.
  void* instrs_ = nullptr;         // Instr[n_instr]
  uint32_t* queue_begin_ = nullptr;// [n_sm + 1]
  void* layers_ = nullptr;         // MkLayer[n_layer]
  float* inv_freq_ = nullptr;      // [head_dim / 2]
  float* ws_ = nullptr;            // [layout.workspace_floats]
  int32_t* tokens_ = nullptr;      // [MAX_STEPS + 1]
  uint32_t* counters_ = nullptr;   // [layout.n_counters]
  uint32_t* error_ = nullptr;      // [4]
  int32_t* out_tokens_ = nullptr;  // [max_context] generate_greedy output
  int smem_x_floats_ = 0, smem_aux_floats_ = 0;
  int prefetch_bytes_ = 0;

 public:
  static constexpr int MAX_STEPS = 256;  // steps per launch
};

// Uploads the model and builds the backend (max_context <= 0: the model's max_position capped at 4096).
Expected<std::unique_ptr<Backend>> make_megakernel_backend(const Model& model, int max_context);

}  // namespace mk::megakernel
