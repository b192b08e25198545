// Internal state of the megakernel simulator (sim.h): tracked memory with happens-before checks,
// virtual SMs with vector clocks, counters. Shared by sim.cpp (driver) and sim_ops.cpp (instructions).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "megakernel/config.h"
#include "megakernel/schedule.h"
#include "model/weights.h"

namespace mk::megakernel {

// One float of simulated global memory: its last writer and the reads of its current value.
struct Access {
  int32_t sm = -1;  // -1: never written; -2: written by the host before the launch
  uint32_t seq = 0; // the writer's instruction sequence number (1-based, per SM)
};

struct Simulator::State {
  ModelConfig config;
  const Weights* weights = nullptr;
  Schedule schedule;
  std::vector<float> inv_freq;  // [head_dim / 2]
  // Memory: workspace (layout offsets), then K cache, V cache, tokens.
  //   k_cache, v_cache: [n_layer][max_context][n_kv_head][head_dim]
  //   tokens:           [max_steps + 1]
  int64_t k_cache = 0, v_cache = 0, tokens = 0, n_floats = 0;
  static constexpr int MAX_STEPS = 64;
  std::vector<float> mem;
  std::vector<Access> writer;                // [n_floats]
  std::vector<std::vector<Access>> readers;  // [n_floats] reads since the last write
  // Virtual SMs and counters.
  std::vector<std::vector<uint32_t>> clock;  // [n_sm][n_sm] vector clocks
  std::vector<uint32_t> seq;                 // [n_sm] instructions executed (own clock entry)
  std::vector<uint64_t> counter;             // [n_counters]
  std::vector<std::vector<uint32_t>> counter_clock;  // [n_counters][n_sm]
  uint32_t epoch = 0;
  // Flag protocol (Protocol::Flags): tag[i] = epoch of the step whose flagged write i holds (NO_TAG: none).
  Protocol protocol = Protocol::Counters;
  static constexpr uint32_t NO_TAG = 0xffffffffu;
  std::vector<uint32_t> tag;                 // [n_floats]
  uint64_t step_counter = 0;                 // the step barrier: one release per SM with a queue per step
  std::vector<uint32_t> step_clock;          // [n_sm] join of the releases
  int n_active = 0;                          // SMs with a non-empty queue
  Op skip_polls_op = Op::Count;              // test hook: this op polls nothing
  bool no_step_barrier = false;              // test hook
  SampleParams sample;                       // this launch's sampling (temperature 0: greedy)
  uint64_t lm_claim = 0;                     // the dynamic LM head's claim counter (isa.h Layout::lm_unit_rows)
  bool extra_lm_claim = false;               // test hook
  // The instruction being executed (for checks and messages).
  int cur_sm = 0;
  int cur_step = 0;     // step within the launch
  int cur_pos = 0;
  const Instr* cur = nullptr;
  int cur_phase = 0;    // of a two-phase instruction (two_phase): 0 its slice of resid_mid, 1 the rest
  std::string error;    // first violation

  void init(const ModelConfig& c, const Weights& w, Schedule s);
  std::string where() const;             // "step 0 SM 3 MlpDown(layer 1, rows [16, 32))"
  std::string region(int64_t off) const; // "o_part[layer 1]..." : names a memory offset
  // Checked accesses by the current instruction. Return false (and set error) on a violation.
  bool read(int64_t off, int64_t n, float* out);
  bool write(int64_t off, int64_t n, const float* in);
  void host_write(int64_t off, float v);
  bool hb(const Access& a) const;        // a happened before the current instruction
  // Executes the current instruction (sim_ops.cpp).
  bool execute();
  // The device issues an attention instruction's loads of cached K/V (positions < pos) BEFORE its
  // dependency wait, once its SM passed a wait of the same step (device/ops/attention.cuh attn_preload).
  // Called with the SM's clock before the instruction's waits: every such position's writer must already
  // have happened before (sim_ops.cpp). False (and error) otherwise.
  bool check_prewait_kv(const Instr& in);
  // Flag protocol: is i a flagged element (workspace except logits unless the launch samples, tokens)? The epoch a reader of the
  // current instruction expects. The ranges [offset, offset + n) the current instruction polls before it
  // runs -- exactly what the device's op reads from flagged memory (sim_ops.cpp).
  bool flagged(int64_t i) const;
  uint32_t cur_epoch() const { return epoch + uint32_t(cur_step); }
  void flag_polls(const Instr& in, std::vector<std::pair<int64_t, int64_t>>& out) const;
  // Flag protocol with the mid-layer residual: MlpGateUp runs in two phases (device/ops/mlp.cuh says why). Phase 0
  // sums and publishes its slice of resid_mid[l]; phase 1 polls the whole resid_mid[l] -- every SM's phase 0 -- and
  // runs the rest. The SM blocks between them like between two instructions.
  bool two_phase(const Instr& in) const {
    return protocol == Protocol::Flags && in.op == Op::MlpGateUp && schedule.layout.mid_resid;
  }
  bool prewait_through_pos = false;  // test hook: check position pos too (must fail)
};

}  // namespace mk::megakernel
