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
  bool prewait_through_pos = false;  // test hook: check position pos too (must fail)
  // The accumulators (flag protocol + mid_resid, isa.h mid_acc_word): the device's words of every slot (resid_mid[l]
  // in slot l; with the fused MLP resid_in(l + 1) in slot n_layer + l: isa.h resid_acc), and per word the epoch of
  // its last contribution (bookkeeping the device does not have: it proves the clearing).
  std::vector<unsigned long long> acc;  // [2][acc_slots][n_embd]
  std::vector<uint32_t> acc_tag;        // NO_TAG: cleared
  int skip_acc_clear = 0;               // test hook: 1 every slot's clears, 2 resid_acc's only
  bool mid_acc() const { return protocol == Protocol::Flags && schedule.layout.mid_resid; }
  bool resid_acc_on() const { return mid_acc() && resid_acc(schedule.layout); }
  // The accumulator slot an instruction polls: MlpGateUp(Down) resid_mid[l]'s; with resid_acc_on, QkvProj (l >= 1)
  // and LmHead resid_in(l)'s; -1 for none. The one mapping of the blocking condition (sim.cpp) and of acc_take.
  int acc_slot_read(const Instr& in) const;
  size_t acc_index(uint32_t e, int slot, int64_t i) const {
    const Layout& L = schedule.layout;
    return size_t((int64_t(e & 1u) * L.acc_slots + slot) * L.n_embd + i);
  }
  uint32_t acc_count(int slot) const {  // contributions per word
    const Layout& L = schedule.layout;
    return 1u + uint32_t(slot < L.n_layer ? L.n_kv_head : L.n_down_parts);
  }
  std::string acc_name(int slot) const;  // "resid_mid[layer 1]", "resid_in(2)"
  // Adds v[0, n) to words [b, b + n) of `slot` at this step. False (and error) when a word still holds another step's
  // sum (not cleared) or already all of this step's contributions.
  bool acc_add(int slot, int64_t b, int64_t n, const float* v);
  // The device's poll condition: every word of the slot at this step counts acc_count(slot).
  bool acc_complete(int slot) const;
  // x = the sums of the slot `in` polls (acc_slot_read(in) >= 0; false and error when a word holds another step's),
  // then clears in's aux slice of the other parity's words (false and error when one holds the next step's adds).
  bool acc_take(const Instr& in, float* x);
};

}  // namespace mk::megakernel
