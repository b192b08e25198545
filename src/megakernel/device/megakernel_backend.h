// MegakernelBackend: the batch-1 decode step as one persistent kernel (interpreter.cu) behind the
// Backend interface. Weights in the layered path's device layout (cuda/backend/device_weights.h), KV
// cache in its paged layout (cuda/backend/kv_cache.h, block size 64, identity block table).
// Prefill runs token by token through the megakernel itself (one launch per token).
// Tests: tests/gpu/test_megakernel.cu. Benchmark: bench/megakernel_decode.cpp (figures in bench/RESULTS.md).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

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
  bool attn_chunks_dynamic = true;   // schedule: split attention's chunk ranges follow the step's position
                                     // (isa.h attn_chunk_range; H200: 1.278 vs 1.297 ms/token at ctx 4096,
                                     // 1.646 vs 1.682 at 16384)
  int slices_per_sm = 1;   // schedule: instructions per SM per matrix stage
  double watchdog_s = 2.0; // a dependency wait longer than this fails the step instead of hanging
  bool weight_ring = true; // stream weights through the shared-memory ring (version 4); false = the
                           // consumer warps load weights themselves (version 2's scheme)
  int ring_loader = 0;     // device::RingLoader: 0 = 1-D bulk copies (TMA), 1 = 16-byte cp.async
  int l2_ahead_pages = 0;  // ring: the loader prefetches into L2 this many pages ahead of the ring
                           // (measured slower: 8 pages 1.31 vs 1.15 ms/token, 16 pages 1.60)
  // Flag-in-data publishing (isa.h "Publishing"; needs the weight ring): 1 on, 0 off (epoch counters),
  // -1 on exactly when attention is inline (H200, 1B shapes, same process: ctx 32 inline 1.016 vs 1.061
  // ms/token with counters; split attention slower with flags: ctx 4096 1.284 vs 1.239, 16384 1.697 vs 1.610).
  int flag_publish = -1;
  // QkvProj / LmHead read the residual materialised by MlpGateUp (isa.h; bit-identical; measured 1-2.5%
  // faster at every context).
  bool mid_resid = true;
  // Version 8 (bench/RESULTS.md "Megakernel v8"): the block table in shared memory (attention's cache offsets
  // without an L2 round trip), and attention's first K/V loads issued one instruction early into a page taken
  // from the ring (kv_early: needs a ring page left free). Measured (H200, 1B): no gain at ctx 32 (1.033 / 1.014
  // vs 1.021 / 0.996 without), kv_early −4–5% at long contexts: both off.
  bool blk_smem = false;
  bool kv_early = false;
  // attn_range skips the position slots, slot merges and warp partials that hold no position (bit-identical;
  // short contexts). -1: on exactly where flags publish (inline attention), 1 on, 0 off. Measured (H200): 1B ctx 32
  // 0.985 vs 0.994 ms/token, 8B 5.084 vs 5.109; split attention (counters) ctx 16384 1.650 vs 1.615: off there.
  int attn_skip = -1;
  // Weight ring pages: at most this many (0: all that fit). H200, 1B shapes, v8 call 1: 4 of the 5 that fit
  // 0.996 / 1.241 / 1.615 ms/token at ctx 32 / 4096 / 16384 vs 1.021 / 1.250 / 1.623 with 5 and 1.022 / 1.257 /
  // 1.627 with 3; 8B shapes: 4 fit (5.110 ms) and 3 lose 7% (5.459).
  int ring_pages = 4;
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
  // Switches the weight ring on (as many pages as fit) or off for the next launches.
  void set_weight_ring(bool on) { n_pages_ = on ? max_pages_ : 0; }
  void set_ring_pages(int n) { n_pages_ = n >= 2 ? std::min(n, max_pages_) : 0; }  // < 2: off
  int ring_pages() const { return n_pages_; }
  void set_ring_loader(int mode) { ring_loader_ = mode; }  // device::RingLoader
  void set_l2_ahead_pages(int n) { l2_ahead_pages_ = std::max(0, n); }
  int l2_ahead_pages() const { return l2_ahead_pages_; }
  int ring_loader() const { return ring_loader_; }
  // MEASUREMENT ONLY, NOT CORRECT (results may be wrong): publish without the release fence, which
  // bounds what a fence-free publishing scheme could gain. Benchmarks only.
  void set_unfenced_publish_for_measurement(bool on) { unfenced_publish_ = on; }
  // device::PublishMode of the next launches (all correct; measured in bench/RESULTS.md).
  void set_publish_mode(int mode) { publish_mode_ = mode >= 0 && mode <= 2 ? mode : 0; }
  int publish_mode() const { return publish_mode_; }
  // Flag-in-data publishing instead of epoch counters for the next launches (isa.h "Publishing"; bit-identical
  // results; needs the weight ring). The residual readers' source (Layout::mid_resid; bit-identical too).
  void set_flag_publish(bool on) { flags_ = on; }
  bool flag_publish() const { return flags_; }
  void set_mid_resid(bool on) { mid_resid_ = on; }
  bool mid_resid() const { return mid_resid_; }
  // RoPE cos/sin of the step's position computed before the dependency wait (with prefetch on; bit-identical).
  void set_rope_early(bool on) { rope_early_ = on; }
  bool rope_early() const { return rope_early_; }
  // Loads that do not depend on this step's producers issued before the dependency wait (on by default).
  void set_prefetch(bool on) { prefetch_ = on; }
  bool prefetch() const { return prefetch_; }
  // Attention: L2 prefetch of the K/V cache this many loop iterations ahead (0 = off; >= 0).
  void set_kv_l2_ahead(int n) { kv_l2_ahead_ = std::max(0, std::min(n, 8)); }
  int kv_l2_ahead() const { return kv_l2_ahead_; }
  // Version 8 switches (MegakernelOptions). kv_early takes effect only while the ring leaves a page free
  // (ring_pages() < max_ring_pages()); kv_early() says whether it does.
  void set_blk_smem(bool on) { blk_smem_ = on; }
  bool blk_smem() const { return blk_smem_; }
  void set_kv_early(bool on) { kv_early_ = on; }
  void set_attn_skip(bool on) { attn_skip_ = on; }
  bool attn_skip() const { return attn_skip_; }
  bool kv_early() const { return kv_early_ && prefetch_ && n_pages_ > 0 && n_pages_ < max_pages_; }
  int max_ring_pages() const { return max_pages_; }
  // In-kernel timestamps of the next launches (off by default): per instruction of the launch's last
  // step, wait / compute / publish times; timing_report() summarises them per op (after a launch).
  Status set_timing(bool on);
  Expected<std::string> timing_report();

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
  unsigned long long* fws_ = nullptr;      // [layout.workspace_floats] flagged pairs (flag protocol)
  unsigned long long* ftokens_ = nullptr;  // [MAX_STEPS + 1] flagged tokens
  bool flags_ = false, mid_resid_ = false;
  uint32_t flag_steps_ = 0;  // steps run with the flag protocol (its step barrier's counter / n_active)
  uint32_t counter_steps_ = 0;  // steps run with the counter protocol (the counters' epoch)
  bool rope_early_ = true;  // measured equal or 0.1-0.5% faster in 8 of 9 same-process comparisons
  int n_active_ = 0;         // SMs with a non-empty queue
  int smem_x_floats_ = 0, smem_aux_floats_ = 0;
  int n_pages_ = 0, max_pages_ = 0;  // weight ring pages in use / that fit
  int ring_loader_ = 0;              // device::RingLoader
  int l2_ahead_pages_ = 0;
  bool unfenced_publish_ = false;
  int publish_mode_ = 2;  // device::PUBLISH_RELEASE_NOFENCE_WAIT: measured fastest (v5, bench/RESULTS.md)
  bool prefetch_ = true;
  int kv_l2_ahead_ = 0;  // measured (v5 R2): 0 / 1 / 2 / 4 iterations 1.649 / 1.671 / 1.674 / 1.679 ms at 16k
  int blk_ints_ = 0;      // block-table entries in shared memory (device::MkParams::blk_ints)
  bool blk_smem_ = false, kv_early_ = false, attn_skip_ = false;
  unsigned long long* timing_ = nullptr;  // device::MkParams::timing (null = off)
  int timing_steps_ = 0;                  // steps of the last launch with timing

 public:
  static constexpr int MAX_STEPS = 256;  // steps per launch
};

// Uploads the model and builds the backend (max_context <= 0: the model's max_position capped at 4096).
Expected<std::unique_ptr<Backend>> make_megakernel_backend(const Model& model, int max_context);

}  // namespace mk::megakernel
