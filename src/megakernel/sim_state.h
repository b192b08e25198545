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
  Op skip_polls_op = Op::Count;              // test hook: this op polls nothing (in phase skip_polls_phase;
  int skip_polls_phase = -1;                 // -1: in every phase)
  bool no_step_barrier = false;              // test hook
  SampleParams sample;                       // this launch's sampling (temperature 0: greedy)
  uint64_t lm_claim = 0;                     // the dynamic LM head's claim counter (isa.h Layout::lm_unit_rows)
  bool extra_lm_claim = false;               // test hook
  // The instruction being executed (for checks and messages).
  int cur_sm = 0;
  int cur_step = 0;     // step within the launch
  int cur_pos = 0;
  const Instr* cur = nullptr;
  int cur_phase = 0;    // of a two-phase instruction (two_phase): 0 its published slice, 1 the rest
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
  // Flag protocol with the mid-layer residual: MlpGateUpDown runs in two phases, and so do the readers of resid_in(l)
  // when resid_two_phase (isa.h). Phase 0 sums and publishes its slice of one vector (phase_sum); phase 1 polls that
  // whole vector -- every SM's phase 0 -- as its x and runs the rest. The SM blocks between them like between two
  // instructions. (MlpGateUp polls its contributors in one phase and sums them as the device's accumulator does:
  // isa.h mid_acc_word.)
  bool two_phase(const Instr& in) const {
    const Layout& L = schedule.layout;
    if (protocol != Protocol::Flags || !L.mid_resid) return false;
    if (in.op == Op::MlpGateUpDown) return true;
    return resid_two_phase(L, true) && ((in.op == Op::QkvProj && in.layer >= 1) || in.op == Op::LmHead);
  }
  // What phase 0 of a two-phase instruction sums over [aux_begin, aux_end), in this order: `first`, then the n_rest
  // vectors at rest + k * n_embd; into `dst`, the vector phase 1 reads whole. MlpGateUpDown: resid[l] + every
  // o_part[l] -> resid_mid[l]; QkvProj, LmHead: resid_mid[l-1] + every down[l-1] -> resid[l] (l = n_layer for LmHead).
  struct PhaseSum {
    int64_t first, rest;
    int n_rest;
    int64_t dst;
  };
  PhaseSum phase_sum(const Instr& in) const {
    const Layout& L = schedule.layout;
    const int64_t E = L.n_embd;
    if (in.op == Op::MlpGateUpDown)
      return {L.resid + in.layer * E, L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head, L.resid_mid + in.layer * E};
    const int64_t l = in.op == Op::LmHead ? L.n_layer : in.layer;
    return {L.resid_mid + (l - 1) * E, L.down + (l - 1) * L.n_down_parts * E, L.n_down_parts, L.resid + l * E};
  }
  bool prewait_through_pos = false;  // test hook: check position pos too (must fail)
  // The mid-layer residual accumulator (flag protocol + mid_resid, isa.h mid_acc_word): the device's words, and per
  // word the epoch of its last contribution (bookkeeping the device does not have: it proves the clearing).
  std::vector<unsigned long long> acc;  // [2][n_layer][n_embd]
  std::vector<uint32_t> acc_tag;        // NO_TAG: cleared
  bool skip_acc_clear = false;          // test hook
  bool fused = false;                   // the schedule's MLP is MlpGateUpDown (two-phase under flags + mid_resid)
  bool mid_acc() const { return protocol == Protocol::Flags && schedule.layout.mid_resid && !fused; }
  size_t acc_index(uint32_t e, int layer, int64_t i) const {
    const Layout& L = schedule.layout;
    return size_t((int64_t(e & 1u) * L.n_layer + layer) * L.n_embd + i);
  }
  uint32_t acc_count() const { return 1u + uint32_t(schedule.layout.n_kv_head); }  // contributions per word
  // Adds v[0, n) to words [b, b + n) of layer `layer` at this step (QkvProj's resid slice, AttnOProj's rows). False
  // (and error) when a word still holds another step's sum (not cleared) or already all of this step's contributions.
  bool acc_add(int layer, int64_t b, int64_t n, const float* v);
  // MlpGateUp: the device's poll condition (every word of the layer at this step counts acc_count()).
  bool acc_complete(int layer) const;
  // MlpGateUp: x = the layer's sums (false and error when a word holds another step's), then clears its aux slice of
  // the other parity's words (false and error when one of them holds the next step's contributions).
  bool acc_take(const Instr& in, float* x);
};

}  // namespace mk::megakernel
