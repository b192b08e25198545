// MegakernelBackend: the batch-1 decode step as one persistent kernel (interpreter.cu) behind the
// Backend interface. Weights in the layered path's device layout (cuda/backend/device_weights.h), KV
// cache in its paged layout (cuda/backend/kv_cache.h, block size 64, identity block table).
// Prompts of several tokens prefill on the layered backend (MegakernelOptions::layered_prefill), which also decodes
// the sampling parameters the megakernel's Argmax does not draw (top-k, top-p) over the same KV cache.
// Sampled decoding (decode_sample) draws each token on the device (isa.h SampleParams, ops/sample.cuh). Stop ids
// (decode_*_until, generate_until; isa.h StopIds) end a decode on the device at the first chosen stop id. In-kernel
// timing: megakernel_timing.cu; the sampled entry points: megakernel_sampling.cu.
// Tests: tests/gpu/test_megakernel*.cu, test_sample_last.cu. Benchmark: bench/megakernel_decode.cpp, `megakernel bench
// --backend megakernel` (figures in bench/RESULTS.md).
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

namespace mk::cuda {
class CudaBackend;
}

namespace mk::megakernel {

// The largest KV cache (positions) whose attention the megakernel keeps inline by default (MegakernelOptions::inline_max).
constexpr int INLINE_ATTENTION_MAX = 256;

struct MegakernelOptions {
  int n_sm = 0;            // persistent blocks; 0 = every SM of the device
  int attn_chunk_len = 0;  // schedule: positions per attention chunk (0 = choose)
  bool attn_chunks_dynamic = true;   // schedule: split attention's chunk ranges follow the step's position
                                     // (isa.h attn_chunk_range; H200: 1.278 vs 1.297 ms/token at ctx 4096,
                                     // 1.646 vs 1.682 at 16384)
  int inline_max = -1;     // schedule (attn_chunk_len 0): attention inline up to this context, split beyond (-1:
                           // INLINE_ATTENTION_MAX); with flags and the ring at most what attn_short holds; without
                           // attn_short (attn_range inline) -1 means 1024
  int slices_per_sm = 1;   // schedule: instructions per SM per matrix stage
  double watchdog_s = 2.0; // a dependency wait longer than this fails the step instead of hanging
  bool weight_ring = true; // stream weights through the shared-memory ring (version 4); false = the
                           // consumer warps load weights themselves (version 2's scheme)
  // Flag-in-data publishing (isa.h "Publishing"; needs the weight ring): 1 on, 0 off (epoch counters), -1 on
  // whenever the ring is, except with split attention whose merge stage does not fit. H200, 1B shapes, same process:
  // ctx 32 0.974 vs 1.099 ms/token with counters; split attention (session 13's merge stage and attn_split, the SPLIT
  // instances) ctx 4096 1.123 vs 1.211, 16384 1.588 vs 1.587 (v7's merge from L2 had made flags slower there).
  int flag_publish = -1;
  // QkvProj / LmHead read the residual materialised by MlpGateUp (isa.h; measured 1-2.5% faster at every context;
  // with flags MlpGateUp takes it from the L2 accumulator, isa.h mid_acc_word: 1B ctx 32 -2.6% more, session 25).
  bool mid_resid = true;
  // Version 9: inline attention of short contexts in parallel phases (device/ops/attn_short.cuh) while the
  // sequence holds at most what its scratch allows (~16 * head_dim positions), with flag publishing (the inline
  // default; the counter instance keeps attn_range); false: attn_range always. H200, same process: 1B ctx 32
  // 0.951 vs 1.014 ms/token off (v8 binary 0.988), 8B 5.021 vs 5.246 (v8 5.089).
  bool attn_short = true;
  // attn_short's K/V stage in shared memory: at most this many positions (0: up to 256, as many as fit beside
  // ring_pages pages; positions past the stage are read from L2 in place). Tests set it small.
  int attn_stage_positions = 0;
  // Session 32: attn_short's steps whose positions fit its stage in whole 16-key tiles run on the tensor cores from
  // that stage instead (device/ops/attn_flat.cuh; bf16 q and P as attn_mma). H200, ctx 32: 1B 0.753 -> 0.735 ms/token,
  // Qwen3-0.6B 0.646 -> 0.592, Qwen3-1.7B 1.151 -> 1.096.
  bool attn_flat = true;
  // Session 17: split attention (the flag protocol's SPLIT instances) on the tensor cores (device/ops/attn_mma.cuh:
  // every warp streams its own 16-key tiles, online softmax in registers, no block barrier per tile; H200, 1B ctx
  // 16384*: 1.270 vs 1.608 ms/token with session 13's attn_split, 4096* -4%): how many consumer warps stream tiles
  // (0: as many as have their stages in shared memory, at most device::WARPS; head dim 128 streams in pairs of them).
  int attn_mma_warps = 0;
  // Weight ring pages: at most this many (0: all that fit). H200, 1B shapes, v8 call 1: 4 of the 5 that fit
  // 0.996 / 1.241 / 1.615 ms/token at ctx 32 / 4096 / 16384 vs 1.021 / 1.250 / 1.623 with 5 and 1.022 / 1.257 /
  // 1.627 with 3; 8B shapes: 4 fit (5.110 ms) and 3 lose 7% (5.459).
  int ring_pages = 4;
  // Prompts of more than one token run on the layered path's prefill (cuBLASLt GEMMs, tiled attention) over the
  // same weights and KV cache, instead of one megakernel step per token (H200, 1B shapes, 32-token prompt: the
  // megakernel's per-token prefill took 30 ms to the first token, the layered one 13). Test:
  // tests/gpu/test_megakernel_prefill.cu.
  bool layered_prefill = true;
  // Version 10: the dynamic LM head (isa.h Layout::lm_unit_rows): each SM streams lm_static_share of its even share
  // of the LM head's pages, then the remaining pages go to whichever SM's loader claims them first, so SMs that
  // stream faster take more (with the ring). H200 (bench/RESULTS.md v10): with 4 static pages per SM the claims
  // slowed the stage's streaming (mean matvec 112.6 -> 122.1 us per step) as much as the balance gained; with 75%
  // static the slowest SM's lateness 6.0 -> 0.5 us and the step barrier's wait 19.0 -> 12.3 us per step, 1B ctx 32
  // 0.924 vs 0.927 ms/token off, ctx 4096 / 16384 and 8B equal (1.211 / 1.591 / 5.009 vs 1.211 / 1.589 / 5.012).
  bool lm_dynamic = true;
  double lm_static_share = 0.75;
  // Session 14: the prefetch gate (device/ring.cuh s_gate): with the ring, the loader issues at most this many pages
  // of a MlpDown or QkvProj instruction before the block's consumers have read that instruction's whole input; 0: no
  // gate (the loader runs as far ahead as the ring allows). H200, 4 ring pages, ABBA in one process: 2 pages 1B
  // 0.907 / 1.095 / 1.564 ms/token at ctx 32 / 4096 / 16384 vs 0.927 / 1.121 / 1.588 without, 8B 4.952 vs 5.018,
  // Qwen3-1.7B 1.461 vs 1.508, Qwen3-0.6B 0.830 either way; 1 page and 3 pages in between (0.6B: 1 page +4.4%).
  int gate_pages = 2;
  // Session 20: MlpGateUp's gate alone (0: gate_pages; device::MkParams::gate_pages_gu), and with inline attention
  // gate_up_extra_pages more ring pages than ring_pages where they fit, all for MlpGateUp's gate (its gate = gate_pages
  // + the pages added, unless gate_pages_gate_up says otherwise): during AttnOProj's polls and attention the ring then
  // holds more of MlpGateUp. H200, call 6, 1B ctx 32 (5 pages fit): 0.802 ms/token against 0.808 with 4 pages and gate
  // 2 everywhere; a 5th page with gate 2 0.812; gate 3 for MlpGateUp at 4 pages 0.806, but +2.4% at Qwen3-0.6B and
  // +0.3% at 8B (where 5 pages do not fit, so the rule changes nothing). Session 22 let the extra page take the K/V
  // stage's room where a page holds a single row (8B); session 32 (attn_flat) gives the stage its room first
  // (megakernel_backend.cu says why: 8B -1.7%). Session 22, call 4: gates of 3, 4 or none at 5 pages are slower everywhere (8B +1..4%).
  int gate_pages_gate_up = 0;
  int gate_up_extra_pages = 1;
};

// Stop ids of one launch of a generate call (MegakernelBackend::generate_until): the ids, the call's first launch
// number, the tokens produced by its earlier launches. ids.n = 0: none.
struct LaunchStops {
  StopIds ids;
  uint32_t call_seq = 0;
  int produced_base = 0;
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
  Status forward_on_device(std::span<const int32_t> tokens, int pos) override;  // no copy of the logits to the host
  void truncate(int pos) override;
  int max_context() const override { return max_context_; }
  const ModelConfig& config() const override { return config_; }

  // Greedy decode on the device: feeds `token` at `pos`, then each argmax back in, steps_per_launch
  // steps per launch (the host only launches); out[i] is the i-th chosen token.
  Status generate_greedy(int32_t token, int pos, std::span<int32_t> out, int steps_per_launch);
  bool has_decode_greedy() const override { return true; }
  // Sampled decode on the device: as generate_greedy, each next token drawn by the host Sampler's rule (a
  // temperature and min-p; isa.h SampleParams, device/ops/sample.cuh) with draw indices first_draw, first_draw + 1,
  // ..., steps_per_launch steps per launch. Only for what draws_in_argmax accepts.
  Status generate_sample(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw, std::span<int32_t> out,
                         int steps_per_launch);
  // What the Argmax instruction draws itself: a temperature and min-p, in the instances with the weight ring.
  bool draws_in_argmax(const SamplingParams& p) const;
  // decode_sample_until: draws_in_argmax's parameters in the megakernel (generate_sample); what only
  // the layered path draws (top-k, top-p: its finish kernel's selection) on the layered backend that prefills, over
  // the same weights and KV cache (ms per token as that backend's, instead of the host Sampler's ~6 ms per top-p
  // token over the Llama 3 vocabulary on the H200).
  bool can_decode_sample(const SamplingParams& p) const override;
  // The draw from the last forward's logits (Backend::sample_last): the layered prefill's after a prompt of several
  // tokens, the megakernel's workspace after a 1-token forward; drawn by the layered backend's sampler either way.
  // Greedy: the layered prefill's argmax, or the megakernel's Argmax instruction's token.
  Expected<int32_t> sample_last(const SamplingParams& p, uint64_t draw) override;
  // Backend::decode_greedy_until / decode_sample_until: MAX_STEPS steps per launch. Stop ids are checked on the device
  // (isa.h StopIds, at most MAX_STOP_IDS): the launch's steps after the one that chose a stop id do not run, and the
  // count comes back with the tokens. With the weight ring (its kernel instances have the check); without it none (the
  // engine then checks on the host).
  int max_stop_ids() const override { return n_pages_ > 0 ? MAX_STOP_IDS : 0; }
  Expected<int> decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                    std::span<int32_t> out) override {
    return generate_until(token, pos, out, MAX_STEPS, {}, stop_ids);
  }
  Expected<int> decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                    std::span<const int32_t> stop_ids, std::span<int32_t> out) override;
  // generate_greedy (sample.temperature = 0) or a sampled generate with stop ids, steps_per_launch steps per launch:
  // returns the tokens produced n (out[0, n) chosen, out[n - 1] the stop id when n < out.size(); out[n, ...) = -1);
  // pos + n positions are cached. Launches after the one that stopped run nothing (no host sync between launches).
  Expected<int> generate_until(int32_t token, int pos, std::span<int32_t> out, int steps_per_launch,
                               const SampleParams& sample, std::span<const int32_t> stop_ids);

  // --- for benchmarks ---
  // Enqueues one launch of n_steps greedy (or, with sample.temperature > 0, sampled) steps starting at pos (token
  // from tokens[0] on the device, or `token` when >= 0). Asynchronous; check_error() synchronises and reports a
  // watchdog. With stops.ids.n > 0 the launch may end early (generate_until accounts for it afterwards).
  Status enqueue(int32_t token, int pos, int n_steps, const SampleParams& sample = {}, const LaunchStops& stops = {});
  Status check_error();
  Status set_random_context(int n);  // pretend positions [0, n) are cached with random K/V
  const Schedule& schedule() const { return schedule_; }
  cudaStream_t stream() const { return stream_; }
  size_t weight_bytes() const { return weights_.bytes; }
  // Switches the weight ring on (as many pages as fit) or off for the next launches.
  void set_weight_ring(bool on) { n_pages_ = on ? max_pages_ : 0; }
  void set_ring_pages(int n) { n_pages_ = n >= 2 ? std::min(n, max_pages_) : 0; }  // < 2: off
  int ring_pages() const { return n_pages_; }
  // Flag-in-data publishing instead of epoch counters for the next launches (isa.h "Publishing"; bit-identical
  // results; needs the weight ring, and with split attention the merge stage and attn_mma's stages in shared memory:
  // without them it stays off). The residual readers' source (Layout::mid_resid; bit-identical too, except that flags +
  // mid_resid sum the mid-layer residual in the L2 accumulator, isa.h mid_acc_word: within tolerance of the others).
  void set_flag_publish(bool on) { flags_ = on && (schedule_.layout.n_chunks == 1 || merge_stage_); }
  bool flag_publish() const { return flags_; }
  void set_mid_resid(bool on) { mid_resid_ = on; }
  bool mid_resid() const { return mid_resid_; }
  // RoPE cos/sin of the step's position computed before the dependency wait (with prefetch on; bit-identical).
  void set_rope_early(bool on) { rope_early_ = on; }
  bool rope_early() const { return rope_early_; }
  // Loads that do not depend on this step's producers issued before the dependency wait (on by default).
  void set_prefetch(bool on) { prefetch_ = on; }
  bool prefetch() const { return prefetch_; }
  // Version 9: attn_short on / off for the next launches (inline attention; not bit-identical to attn_range).
  void set_attn_short(bool on) { attn_short_ = on; }
  bool attn_short() const { return attn_short_; }
  int attn_mma_warps() const;  // split attention's warps that stream tiles (MegakernelOptions::attn_mma_warps)
  int attn_short_max() const { return attn_short_max_; }  // positions (pos + 1) it serves; 0 = none
  int attn_stage() const { return attn_stage_; }          // positions its shared-memory K/V stage holds
  // Session 32: attn_flat on / off for the next launches; the tiles of its stage (0: it never applies).
  void set_attn_flat(bool on) { attn_flat_ = on; }
  int attn_flat_tiles() const { return attn_flat_ ? attn_flat_tiles_ : 0; }
  int max_ring_pages() const { return max_pages_; }
  // Version 10: the dynamic LM head (MegakernelOptions::lm_dynamic) for the next launches.
  void set_gate_pages(int n) { gate_pages_ = std::max(0, n); }
  void set_gate_pages_gate_up(int n) { gate_pages_gu_ = std::max(0, n); }
  int gate_pages_gate_up() const { return gate_pages_gu_; }
  // MlpGateUp's gate as the launches use it: gate_pages_gate_up when set, else gate_pages widened by the ring pages
  // gate_up_extra_pages added (0: no gate).
  int gate_up_gate() const {
    return gate_pages_ == 0 ? 0 : gate_pages_gu_ > 0 ? gate_pages_gu_ : gate_pages_ + gu_extra_pages_;
  }
  int gate_pages() const { return gate_pages_; }
  void set_lm_dynamic(bool on) { lm_dynamic_ = on; }
  bool lm_dynamic() const { return lm_dynamic_; }
  // Whether the next launch runs it: needs the ring and a schedule with LM-head units.
  bool lm_dynamic_on() const { return lm_dynamic_ && n_pages_ > 0 && schedule_.layout.lm_unit_rows > 0; }
  // In-kernel timestamps of the next launches (off by default): per instruction of the launch's last
  // step, wait / compute / publish times; timing_report() summarises them per op (after a launch).
  Status set_timing(bool on);
  Expected<std::string> timing_report();

 private:
  MegakernelBackend() = default;
  Status init(const MegakernelOptions& opt);
  // decode_sample_until's parameters that only the layered backend draws (can_decode_sample): its decode over the
  // shared cache from pos; stop ids checked there when it can, else here after pieces of LAYERED_STOP_PIECE tokens.
  Expected<int> decode_layered(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                               std::span<const int32_t> stop_ids, std::span<int32_t> out);
  // Steps a launch added to the protocol's counters (epoch, step barrier, claim counter): + n per launch in enqueue, and
  // - (steps that did not run) after a stop.
  void count_steps(int64_t n, bool lm_dyn);
  Status clear_mid_acc();  // both sets of the mid-layer residual accumulator's words to zero (on stream_)
  size_t mid_acc_bytes() const { return 2 * size_t(schedule_.layout.acc_slots) * size_t(schedule_.layout.n_embd) * 8; }
  // forward / forward_on_device: logits empty = left on the device.
  Status run_forward(std::span<const int32_t> tokens, int pos, std::span<float> logits);

  ModelConfig config_;
  cuda::DeviceWeights weights_;
  cuda::DeviceKvCache kv_;
  std::unique_ptr<cuda::CudaBackend> prefill_;  // layered_prefill: over aliases of weights_ and kv_
  // Where the last forward's logits are (sample_last): none (no forward since the last decode), prefill_'s, or
  // ws_'s (the megakernel's 1-token step).
  enum class Logits { None, Prefill, Own } last_logits_ = Logits::None;
  static constexpr int LAYERED_STOP_PIECE = 16;  // the engine's DEVICE_CHUNK: a stop wastes at most 15 steps
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
  uint32_t* stop_state_ = nullptr; // [2] device::MkParams::stop_state (tokens produced by the call, stopping launch)
  uint32_t launch_seq_ = 0;        // launches so far (device::MkParams::launch_seq of the last)
  unsigned long long* fws_ = nullptr;      // [layout.workspace_floats] flagged pairs (flag protocol)
  unsigned long long* ftokens_ = nullptr;  // [MAX_STEPS + 1] flagged tokens
  bool flags_ = false, mid_resid_ = false;
  bool mid_acc_clear_ = true;  // the accumulator's words are as the next flags + mid_resid step needs them
  uint32_t flag_steps_ = 0;  // steps run with the flag protocol (its step barrier's counter / n_active)
  uint32_t counter_steps_ = 0;  // steps run with the counter protocol (the counters' epoch)
  bool rope_early_ = true;  // measured equal or 0.1-0.5% faster in 8 of 9 same-process comparisons
  int n_active_ = 0;         // SMs with a non-empty queue
  int smem_x_floats_ = 0, smem_aux_floats_ = 0;
  int n_pages_ = 0, max_pages_ = 0;  // weight ring pages in use / that fit
  bool prefetch_ = true;
  bool attn_short_ = true;
  int attn_mma_want_ = 0;  // split attention's warps asked to stream tiles (0: no split attention)
  bool lm_dynamic_ = true;
  int gate_pages_ = 2;
  int gate_pages_gu_ = 0;   // MegakernelOptions::gate_pages_gate_up
  int gu_extra_pages_ = 0;  // ring pages added for MlpGateUp's gate (MegakernelOptions::gate_up_extra_pages)
  bool merge_stage_ = false;  // split attention: s_x holds AttnOProj's merge stage (the flag protocol's SPLIT instances)
  unsigned long long* lm_claim_ = nullptr;  // [1] the dynamic LM head's claim counter (MkParams::lm_claim)
  unsigned long long lm_claims_ = 0;        // its value after the launches so far
  bool attn_flat_ = true;
  int attn_short_max_ = 0, attn_stage_ = 0, attn_flat_tiles_ = 0;  // device::MkParams::attn_short_max / attn_stage (inline attention)
  unsigned long long* timing_ = nullptr;  // device::MkParams::timing (null = off)
  int timing_steps_ = 0;                  // steps of the last launch with timing

 public:
  static constexpr int MAX_STEPS = 256;  // steps per launch
};

// Uploads the model and builds the backend (max_context <= 0: the model's max_position capped at 4096).
Expected<std::unique_ptr<Backend>> make_megakernel_backend(const Model& model, int max_context);

}  // namespace mk::megakernel
