// The megakernel schedule: from a ModelConfig, the SM count and the context capacity, the per-SM
// instruction queues (isa.h), the workspace layout and the dependency-counter layout of one decode step.
// Nothing here is written for one model or one GPU: every slice is derived from the shapes.
// Tests: tests/megakernel/test_schedule.cpp (build/test_megakernel).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "megakernel/isa.h"

namespace mk::megakernel {

struct ScheduleOptions {
  int n_sm = 0;              // persistent blocks (one per SM)
  int max_context = 0;       // positions the KV cache holds; attention chunks cover [0, max_context)
  int attn_chunk_len = 0;    // positions per attention chunk; 0 = choose (inline attention for short
                             // contexts, else enough chunks to give every SM attention work);
                             // >= max_context = inline (no AttnPartial instructions)
  bool attn_chunks_dynamic = false;  // split attention: chunk ranges follow the step's position
                                     // (isa.h attn_chunk_range), n_chunks = n_sm / n_kv_head exactly
  int inline_max = 1024;     // attn_chunk_len = 0: attention inline up to this max_context, split beyond it (the
                             // device backend lowers it: MegakernelOptions::inline_max)
  int row_granularity = 1;   // slices of matrix rows are multiples of this. 8 until session 19: 1B's gate/up
                             // slices then had 56 or 64 rows where 62 or 63 do (8B: 104 / 112 for 108 / 109), and
                             // the 64-row SMs ended the stage late (H200: 1B -0.3%, Qwen3-0.6B -1.4%, 8B -0.9% with 1)
  int slices_per_sm = 1;     // instructions per SM per matrix stage (more = finer balance, more overhead)
  int weight_bytes = 2;      // bytes per weight element (bf16), for the cost estimate
  int kv_bytes = 2;          // bytes per cached K/V element
  bool fuse_down = false;    // MlpGateUpDown (split-K down projection inside gate/up) instead of
                             // MlpGateUp + MlpDown: one dependency point per layer fewer, the
                             // residual readers sum one down partial per gate/up slice (under flags
                             // + mid_resid: accumulated in L2, isa.h resid_acc)
  bool mid_resid = false;    // Layout::mid_resid: QkvProj / LmHead read the residual materialised by
                             // MlpGateUp (resid_mid) + down instead of resid + every o_part + down
  int lm_unit_rows = 0;      // > 0: the dynamic LM head's units (Layout::lm_unit_rows, isa.h), 0: static slices only
  int lm_static_units = 0;   // the dynamic LM head: units per slice before it claims (Layout::lm_static)
};

// Counter ids of one model (see counter_* below).
struct CounterLayout {
  int n_layer = 0, n_kv_head = 0;
  int per_layer() const { return 4 + n_kv_head; }
  uint32_t qkv(int l) const { return uint32_t(l * per_layer()); }
  uint32_t attn_partial(int l, int g) const { return uint32_t(l * per_layer() + 1 + g); }
  uint32_t attn_o(int l) const { return uint32_t(l * per_layer() + 1 + n_kv_head); }
  uint32_t gate_up(int l) const { return uint32_t(l * per_layer() + 2 + n_kv_head); }
  uint32_t down(int l) const { return uint32_t(l * per_layer() + 3 + n_kv_head); }
  uint32_t lm_head() const { return uint32_t(n_layer * per_layer()); }
  uint32_t sample_partial() const { return lm_head() + 1; }
  uint32_t argmax() const { return lm_head() + 2; }
  int n_counters() const { return int(argmax()) + 1; }
};

struct Schedule {
  Layout layout;
  CounterLayout counters;
  std::vector<std::vector<Instr>> queues;  // [n_sm][queue length], each in dependency (stage) order
  std::vector<uint64_t> sm_bytes;          // [n_sm] estimated bytes each SM loads per step
  uint64_t total_bytes = 0;                // sum of sm_bytes
  std::string stage_report;                // per stage: instructions, bytes, max bytes per SM

  int n_sm() const { return int(queues.size()); }
  size_t n_instr() const;
  // All queues back to back, and offsets[n_sm + 1] into that array (the device's copy).
  void flatten(std::vector<Instr>& instrs, std::vector<uint32_t>& offsets) const;
  // max(sm_bytes) / mean(sm_bytes): 1 is perfect balance.
  double imbalance() const;
  std::string summary() const;  // one line per stage: instructions, bytes, balance
};

// Builds the schedule, or says why it cannot (invalid shapes, more instructions or counters than the
// records can index, a context or vocabulary the layout cannot address).
Expected<Schedule> build_schedule(const ModelConfig& config, const ScheduleOptions& options);

// Splits [0, n) into at most n_slices ranges whose sizes are multiples of `granularity` (the last
// may be shorter), as even as that allows. Never returns an empty range.
std::vector<std::pair<uint32_t, uint32_t>> split_rows(int64_t n, int n_slices, int granularity);

}  // namespace mk::megakernel
