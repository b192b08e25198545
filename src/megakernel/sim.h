// The megakernel simulator: runs a Schedule's per-SM queues on virtual SMs, in random interleavings,
// with the same counter protocol as the device (monotonic epoch counters; wait = counter >= target),
// computing every instruction with the CPU reference ops (cpu/ops.h) in fp32.
//
// It proves the protocol, not just the numbers:
//  - deadlock: when no virtual SM can make progress, the launch fails naming each SM's blocked wait;
//  - races: every element of the workspace, KV cache and token buffer records its last writer and its
//    readers since; a read must happen after its producer's write, and a write after the previous
//    write and all reads of the old value, in the happens-before order that the counters give
//    (vector clocks: a counter increment publishes the SM's clock, a satisfied wait acquires it; a
//    launch boundary joins every clock). A missing wait is caught even when the interleaving happened
//    to run the producer first;
//  - the accumulators (flags + mid_resid, isa.h mid_acc_word; with the fused MLP resid_acc too): contributions are
//    added to the device's words, a reader runs once every word counts all of them (the device's poll) and clears
//    the other parity's slice; a word that still holds another step's sum, or that gets one contribution too many,
//    or a clear after the next step's contributions, is an error.
// Tests: tests/megakernel/test_sim.cpp (build/test_megakernel).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "megakernel/model.h"
#include "megakernel/schedule.h"
#include "runtime/backend.h"

namespace mk::megakernel {

struct SimResult {
  std::vector<int32_t> tokens;   // [steps run] token chosen by each step's Argmax (n_steps unless a stop id ended it)
  std::vector<float> logits;     // [n_vocab] logits of the last step
  uint64_t n_executed = 0;       // instructions executed
  uint64_t n_blocked = 0;        // attempts that found a wait unsatisfied
};

// How instructions publish and wait (isa.h "Publishing"): epoch counters (release increment, acquire wait),
// or flag-in-data (every workspace element tagged with its step's epoch; a reader polls exactly the
// elements it reads; the K/V cache ordered by a release/acquire step barrier).
enum class Protocol { Counters, Flags };

class Simulator {
 public:
  // `weights` must outlive the simulator. The KV cache holds schedule.layout.max_context positions.
  Simulator(const ModelConfig& config, const Weights& weights, Schedule schedule, Protocol protocol = Protocol::Counters);
  ~Simulator();

  // One launch of n_steps decode steps: step i runs token tokens[i] at position pos + i, where
  // tokens[0] = token and tokens[i + 1] is step i's greedy choice (chosen "on the device").
  // Positions below pos must have been run before. seed picks the interleaving; round_robin = true
  // runs the SMs in a fixed order instead. sample.temperature > 0: tokens[i + 1] is drawn by the host Sampler's
  // rule with draw index sample.first_draw + i instead (isa.h SampleParams; sample_draw below).
  // stops (isa.h StopIds): the launch ends after the step whose token is one of them, as the device's: every SM checks
  // tokens[s] before its first instruction of step s >= 1 (flags: after the step barrier; counters: before its first
  // wait, polling the token's flagged copy); result.tokens then has that many entries, the stop id last, and the
  // epoch, counters and cache stand as after a launch of that many steps. SMs that disagree are an error.
  Expected<SimResult> launch(int32_t token, int pos, int n_steps, uint64_t seed, bool round_robin = false,
                             const SampleParams& sample = {}, const StopIds& stops = {});

  uint32_t epoch() const;           // steps run so far (the counters' epoch)
  const Schedule& schedule() const;

  // Test hook: drop wait `index` of every instruction of `op` (to prove the race checker fires).
  void drop_wait_for_test(Op op, int index);
  // Test hook: the pre-wait K/V check (State::check_prewait_kv) also covers position pos, which this
  // step's attention appends -- an unsafe preload, to prove that check fires.
  void preload_current_pos_for_test();
  // Test hooks of the flag protocol: `op` runs without polling its inputs' flags or accumulator words (it must be
  // caught reading a stale element); the step barrier left out (the K/V cache and the next step's overwrites race).
  void skip_flag_polls_for_test(Op op);
  void drop_step_barrier_for_test();
  // Test hook of the dynamic LM head: every LmHead instruction claims once more than the device does (the
  // per-step claim ranges then drift; Argmax's check must catch it).
  void extra_lm_claim_for_test();
  // Test hook of the accumulators (flag protocol + mid_resid, isa.h mid_acc_word): their readers leave the other
  // parity's words as they are (the next step but one must be caught adding to a stale sum); `resid_only`: only the
  // fused MLP's resid_in words (isa.h resid_acc).
  void skip_acc_clear_for_test(bool resid_only = false);

  struct State;  // internal (sim_state.h)

 private:
  std::unique_ptr<State> st_;
};

// The host Sampler's rule (runtime/sampler.h) for a temperature and min-p, written out on its own (the simulator
// cannot link the runtime): the token drawn from logits[n] with u = philox_uniform(sp.seed, draw); -1 when no logit
// is finite. tests/megakernel check it against mk::Sampler.
int32_t sample_draw(const float* logits, int n, const SampleParams& sp, uint64_t draw);

// The same draw in the megakernel's two stages (isa.h SamplePartial / Argmax; device/ops/sample.cuh), in the device's
// arithmetic, so that the simulator runs the device's protocol: m is the max finite logit (sample_max), every range
// of whole SAMPLE_TILEs sums its weights (sample_part_sum), and the draw picks the range whose prefix passes
// u * total, then the id in it (sample_pick_part, sample_pick_in_part). It equals sample_draw but where u * total is
// within rounding of a boundary (tests/megakernel/test_sim_sample.cpp).
struct SamplePart {
  double sum = 0;      // the range's weights, tile by tile (the device's order)
  int32_t kept = -1;   // its last kept id
};
float sample_max(const float* logits, int n);  // -inf when no logit is finite
SamplePart sample_part_sum(const float* logits, int n, int r0, int r1, float m, const SampleParams& sp);
// The range that holds u * total, and the target relative to its start (*t); -1 when rounding put u * total past the
// last range's end (the caller then takes the last kept id of all).
int sample_pick_part(const std::vector<SamplePart>& parts, const SampleParams& sp, uint64_t draw, double* t);
// The id of range [r0, r1) whose running sum passes t (the range's kept id when rounding leaves it short).
int32_t sample_pick_in_part(const float* logits, int n, int r0, int r1, float m, const SampleParams& sp, double t,
                            int32_t part_kept);

// A Backend that runs each token as one simulated launch (tests, `--backend megakernel-sim`).
// max_context <= 0: the model's max_position capped at 1024.
Expected<std::unique_ptr<Backend>> make_sim_backend(const Model& model, int n_sm, int max_context, uint64_t seed);

}  // namespace mk::megakernel
