// Builds the per-SM instruction queues of one decode step (see schedule.h and isa.h).
//
// Stages are emitted in dependency order (per layer: QkvProj, AttnPartial, AttnOProj, MlpGateUp,
// MlpDown; then LmHead, SamplePartial, Argmax), and every queue holds its instructions in that same order. A wait
// only names counters of earlier stages (or the previous step's Argmax), so with all SMs resident the
// step cannot deadlock: by induction over stages, every instruction of stage s eventually runs once
// all of stages < s have (sim.cpp checks this on random interleavings).
//
// Balance: within each stage, instructions (largest first) go to the SM with the least bytes in that
// stage, ties broken by the least bytes overall -- every stage ends with a dependency point, so it is
// the per-stage balance that sets the time.
#include "megakernel/schedule.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace mk::megakernel {

const char* op_name(Op op) {
  switch (op) {
    case Op::Nop: return "Nop";
    case Op::QkvProj: return "QkvProj";
    case Op::AttnPartial: return "AttnPartial";
    case Op::AttnOProj: return "AttnOProj";
    case Op::MlpGateUp: return "MlpGateUp";
    case Op::MlpDown: return "MlpDown";
    case Op::LmHead: return "LmHead";
    case Op::Argmax: return "Argmax";
    case Op::MlpGateUpDown: return "MlpGateUpDown";
    case Op::SamplePartial: return "SamplePartial";
    case Op::Count: break;
  }
  return "?";
}

std::vector<std::pair<uint32_t, uint32_t>> split_rows(int64_t n, int n_slices, int granularity) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  if (n <= 0) return out;
  int64_t units = (n + granularity - 1) / granularity;
  int64_t s = std::clamp<int64_t>(n_slices, 1, units);
  int64_t begin = 0;
  for (int64_t i = 0; i < s; ++i) {
    int64_t u = units / s + (i < units % s ? 1 : 0);  // units of this slice
    int64_t end = std::min(n, begin + u * granularity);
    out.emplace_back(uint32_t(begin), uint32_t(end));
    begin = end;
  }
  return out;
}

size_t Schedule::n_instr() const {
  size_t n = 0;
  for (const auto& q : queues) n += q.size();
  return n;
}

void Schedule::flatten(std::vector<Instr>& instrs, std::vector<uint32_t>& offsets) const {
  instrs.clear();
  offsets.assign(1, 0);
  for (const auto& q : queues) {
    instrs.insert(instrs.end(), q.begin(), q.end());
    offsets.push_back(uint32_t(instrs.size()));
  }
}

double Schedule::imbalance() const {
  if (sm_bytes.empty() || total_bytes == 0) return 1.0;
  uint64_t mx = *std::max_element(sm_bytes.begin(), sm_bytes.end());
  return double(mx) * double(sm_bytes.size()) / double(total_bytes);
}

namespace {

struct Pending {
  Instr instr;
  uint64_t bytes = 0;
};

class Builder {
 public:
  Builder(const ScheduleOptions& o, Schedule& s) : o_(o), s_(s) {
    stage_bytes_.assign(size_t(o.n_sm), 0);
  }

  Instr make(Op op, int layer, uint32_t signal, uint32_t wait_counter, uint16_t wait_count, uint8_t lag = 0) {
    Instr in;
    in.op = op;
    in.layer = uint16_t(layer);
    in.signal = signal;
    in.n_waits = 1;
    in.waits[0] = Wait{wait_counter, wait_count, lag, 0};
    return in;
  }

  // Assigns one stage's instructions to SMs (largest first, least-loaded SM in this stage).
  void emit_stage(std::vector<Pending> stage) {
    std::stable_sort(stage.begin(), stage.end(),
                     [](const Pending& a, const Pending& b) { return a.bytes > b.bytes; });
    std::fill(stage_bytes_.begin(), stage_bytes_.end(), 0);
    for (const Pending& p : stage) {
      int best = 0;
      for (int sm = 1; sm < o_.n_sm; ++sm) {
        auto key = [&](int i) { return std::pair(stage_bytes_[size_t(i)], s_.sm_bytes[size_t(i)]); };
        if (key(sm) < key(best)) best = sm;
      }
      stage_bytes_[size_t(best)] += p.bytes;
      s_.sm_bytes[size_t(best)] += p.bytes;
      s_.total_bytes += p.bytes;
      s_.queues[size_t(best)].push_back(p.instr);
    }
    stats_ << "  " << (stage.empty() ? "-" : op_name(stage[0].instr.op)) << ": " << stage.size()
           << " instr, " << std::accumulate(stage_bytes_.begin(), stage_bytes_.end(), uint64_t(0))
           << " B, max/SM " << *std::max_element(stage_bytes_.begin(), stage_bytes_.end()) << " B\n";
  }

  std::string stats() const { return stats_.str(); }

 private:
  const ScheduleOptions& o_;
  Schedule& s_;
  std::vector<uint64_t> stage_bytes_;
  std::ostringstream stats_;
};

Status validate(const ModelConfig& c, const ScheduleOptions& o) {
  if (o.n_sm < 1 || o.n_sm > 4096) return make_error("megakernel schedule: n_sm = ", o.n_sm, ", expected 1..4096");
  if (o.max_context < 1) return make_error("megakernel schedule: max_context = ", o.max_context, ", expected >= 1");
  if (o.lm_unit_rows < 0 || o.lm_static_units < 0)
    return make_error("megakernel schedule: lm_unit_rows ", o.lm_unit_rows, " and lm_static_units ", o.lm_static_units,
                      " must be >= 0");
  if (o.row_granularity < 1 || o.slices_per_sm < 1 || o.attn_chunk_len < 0)
    return make_error("megakernel schedule: row_granularity and slices_per_sm must be >= 1, attn_chunk_len >= 0");
  if (c.n_layer < 1 || c.n_embd < 1 || c.n_ff < 1 || c.n_vocab < 1 || c.n_head < 1 || c.n_kv_head < 1)
    return make_error("megakernel schedule: model shapes must be positive (n_layer ", c.n_layer, ", n_embd ",
                      c.n_embd, ", n_ff ", c.n_ff, ", n_vocab ", c.n_vocab, ", n_head ", c.n_head, ", n_kv_head ",
                      c.n_kv_head, ")");
  if (c.n_head % c.n_kv_head != 0)
    return make_error("megakernel schedule: n_head ", c.n_head, " is not a multiple of n_kv_head ", c.n_kv_head);
  if (c.head_dim < 2 || c.head_dim % 2 != 0)
    return make_error("megakernel schedule: head_dim ", c.head_dim, " must be even (RoPE rotates pairs)");
  if (c.n_layer > 65535 || c.n_kv_head > 65535)
    return make_error("megakernel schedule: ", c.n_layer, " layers / ", c.n_kv_head,
                      " kv heads exceed the instruction record's 16-bit fields");
  if (c.n_vocab >= (1 << 24))
    return make_error("megakernel schedule: n_vocab ", c.n_vocab, " >= 2^24 (argmax indices travel as fp32)");
  if (c.n_kv_head > 254)
    return make_error("megakernel schedule: ", c.n_kv_head,
                      " kv heads, expected <= 254 (isa.h mid_acc_word counts 1 + n_kv_head contributions in 8 bits)");
  if (c.max_position > 0 && o.max_context > c.max_position)
    return make_error("megakernel schedule: max_context ", o.max_context, " exceeds the model's max_position ",
                      c.max_position);
  return {};
}

// The sampled draw's ranges (isa.h SamplePartial): whole tiles, as even as that allows, one per SM at most.
int sample_part_tiles(int n_vocab, int n_sm) {
  const int tiles = (n_vocab + SAMPLE_TILE - 1) / SAMPLE_TILE;
  return (tiles + n_sm - 1) / n_sm;
}

Layout make_layout(const ModelConfig& c, const ScheduleOptions& o, int n_lm_slices, int n_down_parts) {
  Layout L;
  L.n_layer = c.n_layer, L.n_embd = c.n_embd, L.n_ff = c.n_ff, L.n_vocab = c.n_vocab;
  L.n_head = c.n_head, L.n_kv_head = c.n_kv_head, L.head_dim = c.head_dim, L.group = c.n_head / c.n_kv_head;
  L.qkv_dim = c.q_dim() + 2 * c.kv_dim();
  L.max_context = o.max_context;
  int chunk = o.attn_chunk_len;
  if (chunk == 0) {
    // Short contexts: attention inline in the O projection (one dependency point fewer). Long ones:
    // enough chunks that (kv heads x chunks) covers the SMs, each a multiple of 64 positions.
    int want = std::max(1, o.n_sm / c.n_kv_head);
    chunk = o.max_context <= o.inline_max ? o.max_context : ((o.max_context + want - 1) / want + 63) / 64 * 64;
    // Dynamic chunks: exactly `want` of them (the ranges follow pos; chunk_len only sizes the estimate).
    if (o.attn_chunks_dynamic && o.max_context > o.inline_max) chunk = (o.max_context + want - 1) / want;
  }
  chunk = std::min(chunk, o.max_context);
  L.chunk_len = chunk;
  L.n_chunks = (o.max_context + chunk - 1) / chunk;
  L.chunk_dynamic = o.attn_chunks_dynamic && L.n_chunks > 1 ? 1 : 0;
  L.n_lm_slices = n_lm_slices;
  L.n_down_parts = n_down_parts;
  L.att_part_stride = L.group * (c.head_dim + 2);
  int64_t off = 0;
  auto take = [&](int64_t n) { int64_t at = off; off += (n + 3) / 4 * 4; return at; };  // 16-B aligned
  L.resid = take(int64_t(c.n_layer) * c.n_embd);
  L.qkv = take(int64_t(c.n_layer) * L.qkv_dim);
  L.att_part = take(int64_t(c.n_layer) * c.n_kv_head * L.n_chunks * L.att_part_stride);
  L.o_part = take(int64_t(c.n_layer) * c.n_kv_head * c.n_embd);
  L.act = take(int64_t(c.n_layer) * c.n_ff);
  L.down = take(int64_t(c.n_layer) * n_down_parts * c.n_embd);
  L.resid_mid = take(int64_t(c.n_layer) * c.n_embd);
  L.mid_resid = o.mid_resid ? 1 : 0;
  L.acc_slots = (o.fuse_down && o.mid_resid ? 2 : 1) * c.n_layer;  // isa.h resid_acc
  L.mid_acc = take(2 * int64_t(L.acc_slots) * c.n_embd);
  L.logits = take(c.n_vocab);
  L.amax = take(int64_t(n_lm_slices) * 2);
  L.sample_part_tiles = sample_part_tiles(c.n_vocab, o.n_sm);
  L.n_sample_parts = Layout::sample_parts(c.n_vocab, L.sample_part_tiles);
  L.sample_part = take(int64_t(L.n_sample_parts) * 4);
  if (o.lm_unit_rows > 0) {
    L.lm_unit_rows = o.lm_unit_rows;
    L.lm_units = (c.n_vocab + o.lm_unit_rows - 1) / o.lm_unit_rows;
    L.lm_static = std::max(0, o.lm_static_units);
  }
  L.workspace_floats = off;
  return L;
}

}  // namespace

Expected<Schedule> build_schedule(const ModelConfig& c, const ScheduleOptions& o) {
  MK_TRY(validate(c, o));
  const int gran = o.row_granularity, target = o.n_sm * o.slices_per_sm;
  const uint64_t wb = uint64_t(o.weight_bytes), n_embd = uint64_t(c.n_embd);
  auto lm_rows = split_rows(c.n_vocab, target, gran);
  auto ff_rows = split_rows(c.n_ff, target, gran);
  Schedule s;
  s.layout = make_layout(c, o, int(lm_rows.size()), o.fuse_down ? int(ff_rows.size()) : 1);
  if (o.fuse_down && o.mid_resid && ff_rows.size() > 254)
    return make_error("megakernel schedule: the fused MLP's ", ff_rows.size(), " down partials exceed 254 (isa.h ",
                      "mid_acc_word counts 1 + n_down_parts contributions in 8 bits); lower slices_per_sm");
  const Layout& L = s.layout;
  s.counters = CounterLayout{c.n_layer, c.n_kv_head};
  const CounterLayout& C = s.counters;
  if (C.n_counters() > (1 << 24))
    return make_error("megakernel schedule: ", C.n_counters(), " dependency counters exceed the limit 2^24");
  if (L.n_chunks > 65535)
    return make_error("megakernel schedule: ", L.n_chunks, " attention chunks exceed 65535; raise attn_chunk_len");
  s.queues.assign(size_t(o.n_sm), {});
  s.sm_bytes.assign(size_t(o.n_sm), 0);
  Builder b(o, s);
  const bool split_attn = L.n_chunks > 1;
  const uint64_t kv_bytes_per_pos = uint64_t(c.head_dim) * 2 * uint64_t(o.kv_bytes);

  auto qkv_rows = split_rows(L.qkv_dim, target, gran);
  auto resid_rows = split_rows(c.n_embd, int(qkv_rows.size()), 1);
  int o_slices = std::max(1, target / c.n_kv_head);  // round down: a second slice on some SMs doubles the stage
  auto o_rows = split_rows(c.n_embd, o_slices, gran);
  auto down_rows = split_rows(c.n_embd, target, gran);
  auto mid_rows = split_rows(c.n_embd, int(ff_rows.size()), 1);  // resid_mid slices of the gate/up instructions
  const size_t n_down = o.fuse_down ? ff_rows.size() : down_rows.size();  // signals of counter down(l)
  auto count16 = [](size_t n) { return uint16_t(n); };
  for (size_t n : {qkv_rows.size(), o_rows.size() * size_t(c.n_kv_head), ff_rows.size(), down_rows.size(),
                   lm_rows.size(), size_t(L.n_chunks), size_t(L.n_sample_parts)})
    if (n > 65535) return make_error("megakernel schedule: a stage of ", n, " instructions exceeds 65535");

  for (int l = 0; l < c.n_layer; ++l) {
    std::vector<Pending> stage;
    for (size_t i = 0; i < qkv_rows.size(); ++i) {
      Instr in = l == 0 ? b.make(Op::QkvProj, l, C.qkv(l), C.argmax(), 1, /*lag=*/1)
                        : b.make(Op::QkvProj, l, C.qkv(l), C.down(l - 1), count16(n_down));
      in.row_begin = qkv_rows[i].first, in.row_end = qkv_rows[i].second;
      if (i < resid_rows.size()) in.aux_begin = resid_rows[i].first, in.aux_end = resid_rows[i].second;
      stage.push_back({in, uint64_t(in.row_end - in.row_begin) * n_embd * wb});
    }
    b.emit_stage(std::move(stage));
    if (split_attn) {
      stage.clear();
      for (int g = 0; g < c.n_kv_head; ++g)
        for (int ch = 0; ch < L.n_chunks; ++ch) {
          Instr in = b.make(Op::AttnPartial, l, C.attn_partial(l, g), C.qkv(l), count16(qkv_rows.size()));
          in.group = uint16_t(g), in.chunk = uint16_t(ch);
          in.row_begin = uint32_t(ch * L.chunk_len);
          in.row_end = uint32_t(std::min(L.max_context, (ch + 1) * L.chunk_len));
          stage.push_back({in, uint64_t(in.row_end - in.row_begin) * kv_bytes_per_pos});
        }
      b.emit_stage(std::move(stage));
    }
    stage.clear();
    for (int g = 0; g < c.n_kv_head; ++g)
      for (size_t i = 0; i < o_rows.size(); ++i) {
        Instr in = split_attn ? b.make(Op::AttnOProj, l, C.attn_o(l), C.attn_partial(l, g), count16(L.n_chunks))
                              : b.make(Op::AttnOProj, l, C.attn_o(l), C.qkv(l), count16(qkv_rows.size()));
        in.group = uint16_t(g);
        in.row_begin = o_rows[i].first, in.row_end = o_rows[i].second;
        if (!split_attn && i == 0) in.flags |= FLAG_APPEND_KV;
        uint64_t bytes = uint64_t(in.row_end - in.row_begin) * uint64_t(L.group * c.head_dim) * wb;
        if (!split_attn) bytes += uint64_t(L.max_context) * kv_bytes_per_pos;
        stage.push_back({in, bytes});
      }
    b.emit_stage(std::move(stage));
    stage.clear();
    const uint16_t n_attn_o = count16(o_rows.size() * size_t(c.n_kv_head));
    if (o.fuse_down) {
      for (size_t i = 0; i < ff_rows.size(); ++i) {
        auto [r0, r1] = ff_rows[i];
        Instr in = b.make(Op::MlpGateUpDown, l, C.down(l), C.attn_o(l), n_attn_o);
        in.row_begin = r0, in.row_end = r1, in.chunk = uint16_t(i);
        if (i < mid_rows.size()) in.aux_begin = mid_rows[i].first, in.aux_end = mid_rows[i].second;
        stage.push_back({in, 3 * uint64_t(r1 - r0) * n_embd * wb});
      }
      b.emit_stage(std::move(stage));
      continue;
    }
    for (size_t i = 0; i < ff_rows.size(); ++i) {
      auto [r0, r1] = ff_rows[i];
      Instr in = b.make(Op::MlpGateUp, l, C.gate_up(l), C.attn_o(l), n_attn_o);
      in.row_begin = r0, in.row_end = r1;
      if (i < mid_rows.size()) in.aux_begin = mid_rows[i].first, in.aux_end = mid_rows[i].second;
      stage.push_back({in, 2 * uint64_t(r1 - r0) * n_embd * wb});
    }
    b.emit_stage(std::move(stage));
    stage.clear();
    for (auto [r0, r1] : down_rows) {
      Instr in = b.make(Op::MlpDown, l, C.down(l), C.gate_up(l), count16(ff_rows.size()));
      in.row_begin = r0, in.row_end = r1;
      stage.push_back({in, uint64_t(r1 - r0) * uint64_t(c.n_ff) * wb});
    }
    b.emit_stage(std::move(stage));
  }
  std::vector<Pending> stage;
  // Fused MLP: the slices of resid_in(n_layer)'s accumulator words each LmHead clears (isa.h resid_acc).
  const auto final_rows = o.fuse_down ? split_rows(c.n_embd, int(lm_rows.size()), 1) : decltype(lm_rows){};
  for (size_t i = 0; i < lm_rows.size(); ++i) {
    Instr in = b.make(Op::LmHead, c.n_layer - 1, C.lm_head(), C.down(c.n_layer - 1), count16(n_down));
    in.row_begin = lm_rows[i].first, in.row_end = lm_rows[i].second;
    in.chunk = uint16_t(i);
    if (i < final_rows.size()) in.aux_begin = final_rows[i].first, in.aux_end = final_rows[i].second;
    stage.push_back({in, uint64_t(in.row_end - in.row_begin) * n_embd * wb});
  }
  b.emit_stage(std::move(stage));
  stage.clear();
  // The sampled draw's ranges; the "bytes" are the logits each reads (pairs), so that they spread over the SMs.
  for (int k = 0; k < L.n_sample_parts; ++k) {
    Instr in = b.make(Op::SamplePartial, c.n_layer - 1, C.sample_partial(), C.lm_head(), count16(lm_rows.size()));
    int r0, r1;
    L.sample_part_range(k, r0, r1);
    in.row_begin = uint32_t(r0), in.row_end = uint32_t(r1), in.chunk = uint16_t(k);
    stage.push_back({in, uint64_t(in.row_end - in.row_begin) * 8});
  }
  b.emit_stage(std::move(stage));
  stage.clear();
  // Argmax: the LM head's records (a greedy launch), and in a sampled launch the ranges' sums (isa.h).
  Instr am = b.make(Op::Argmax, 0, C.argmax(), C.lm_head(), count16(lm_rows.size()));
  am.n_waits = 2;
  am.waits[1] = Wait{C.sample_partial(), count16(size_t(L.n_sample_parts)), 0, 0};
  stage.push_back({am, 0});
  b.emit_stage(std::move(stage));
  s.layout.n_counters = C.n_counters();
  s.stage_report = b.stats();
  return s;
}

std::string Schedule::summary() const {
  std::ostringstream os;
  os << "megakernel schedule: " << n_sm() << " SMs, " << n_instr() << " instructions, " << layout.n_counters
     << " counters, " << total_bytes << " B/step, imbalance " << imbalance() << ", attention "
     << (layout.n_chunks > 1 ? "split into " : "inline, ") << layout.n_chunks << " chunk(s) of "
     << layout.chunk_len << " positions";
  return os.str();
}

}  // namespace mk::megakernel
