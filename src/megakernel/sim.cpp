// The megakernel simulator's driver (see sim.h): tracked memory, vector clocks, counters and the
// random interleaving of virtual SMs. The instructions themselves are in sim_ops.cpp.
#include "megakernel/sim.h"

#include <algorithm>
#include <random>

#include "cpu/ops.h"
#include "megakernel/sim_state.h"

namespace mk::megakernel {

void Simulator::State::init(const ModelConfig& c, const Weights& w, Schedule s) {
  config = c;
  weights = &w;
  schedule = std::move(s);
  cpu::rope_inv_freq(inv_freq, c.rope, c.head_dim);
  const Layout& L = schedule.layout;
  const int64_t cache = int64_t(L.n_layer) * L.max_context * L.n_kv_head * L.head_dim;
  k_cache = L.workspace_floats;
  v_cache = k_cache + cache;
  tokens = v_cache + cache;
  n_floats = tokens + MAX_STEPS + 1;
  mem.assign(size_t(n_floats), std::numeric_limits<float>::quiet_NaN());  // poisoned
  writer.assign(size_t(n_floats), Access{});
  readers.assign(size_t(n_floats), {});
  const int n_sm = schedule.n_sm();
  clock.assign(size_t(n_sm), std::vector<uint32_t>(size_t(n_sm), 0));
  seq.assign(size_t(n_sm), 0);
  counter.assign(size_t(L.n_counters), 0);
  counter_clock.assign(size_t(L.n_counters), std::vector<uint32_t>(size_t(n_sm), 0));
  tag.assign(size_t(n_floats), NO_TAG);
  acc.assign(size_t(2 * L.acc_slots) * size_t(L.n_embd), 0ull);
  acc_tag.assign(acc.size(), NO_TAG);
  step_clock.assign(size_t(n_sm), 0);
  n_active = 0;
  for (const auto& q : schedule.queues) n_active += q.empty() ? 0 : 1;
}

bool Simulator::State::flagged(int64_t i) const {
  const Layout& L = schedule.layout;
  // Logits: read by the host only, after the launch -- unless the launch samples (isa.h: then flagged).
  if (i >= L.logits && i < L.logits + L.n_vocab) return sample.temperature > 0.f;
  return i < L.workspace_floats || (i >= tokens && i < n_floats);
}

std::string Simulator::State::where() const {
  if (!cur) return "host";
  return cat("step ", cur_step, " (pos ", cur_pos, ") SM ", cur_sm, " ", op_name(cur->op), "(layer ", cur->layer,
             ", group ", cur->group, ", chunk ", cur->chunk, ", rows [", cur->row_begin, ", ", cur->row_end, "))");
}

std::string Simulator::State::region(int64_t off) const {
  const Layout& L = schedule.layout;
  struct R { const char* name; int64_t begin; };
  const R rs[] = {{"resid", L.resid}, {"qkv", L.qkv}, {"att_part", L.att_part}, {"o_part", L.o_part},
                  {"act", L.act}, {"down", L.down}, {"resid_mid", L.resid_mid}, {"mid_acc", L.mid_acc},
                  {"logits", L.logits}, {"amax", L.amax},
                  {"sample_part", L.sample_part},
                  {"k_cache", k_cache}, {"v_cache", v_cache}, {"tokens", tokens}};
  const R* best = &rs[0];
  for (const R& r : rs)
    if (r.begin <= off && r.begin >= best->begin) best = &r;
  return cat(best->name, "[+", off - best->begin, "]");
}

bool Simulator::State::hb(const Access& a) const {
  if (a.sm == -2) return true;  // host write before the launch
  return a.sm >= 0 && clock[size_t(cur_sm)][size_t(a.sm)] >= a.seq;
}

bool Simulator::State::read(int64_t off, int64_t n, float* out) {
  if (off < 0 || off + n > n_floats) {
    error = cat(where(), " reads out of bounds [", off, ", ", off + n, ")");
    return false;
  }
  const Access me{cur_sm, seq[size_t(cur_sm)]};
  for (int64_t i = off; i < off + n; ++i) {
    const Access& w = writer[size_t(i)];
    if (w.sm == -1) {
      error = cat(where(), " reads ", region(i), " which nothing wrote");
      return false;
    }
    if (protocol == Protocol::Flags && flagged(i)) {
      // A relaxed read of a (value, epoch) pair: valid exactly when it holds this step's write. It orders
      // nothing else (no clock is joined), so anything unflagged still needs happens-before below.
      if (tag[size_t(i)] != cur_epoch()) {
        error = cat(where(), " reads ", region(i), " whose flag holds epoch ", int64_t(tag[size_t(i)]),
                    ", not this step's ", cur_epoch(), " (read before its producer's write)");
        return false;
      }
    } else if (!hb(w)) {
      error = cat(where(), " reads ", region(i), " without waiting for its writer (SM ", w.sm, " instruction #",
                  w.seq, ")");
      return false;
    }
    auto& rd = readers[size_t(i)];
    if (rd.empty() || rd.back().sm != me.sm || rd.back().seq != me.seq) rd.push_back(me);
    out[i - off] = mem[size_t(i)];
  }
  return true;
}

bool Simulator::State::write(int64_t off, int64_t n, const float* in) {
  if (off < 0 || off + n > n_floats) {
    error = cat(where(), " writes out of bounds [", off, ", ", off + n, ")");
    return false;
  }
  for (int64_t i = off; i < off + n; ++i) {
    const Access& w = writer[size_t(i)];
    if (w.sm >= 0 && w.sm != cur_sm && !hb(w)) {
      error = cat(where(), " overwrites ", region(i), " racing with its previous writer (SM ", w.sm, ")");
      return false;
    }
    for (const Access& r : readers[size_t(i)])
      if (r.sm != cur_sm && !hb(r)) {
        error = cat(where(), " overwrites ", region(i), " while SM ", r.sm, " may still read the old value");
        return false;
      }
    readers[size_t(i)].clear();
    writer[size_t(i)] = Access{cur_sm, seq[size_t(cur_sm)]};
    mem[size_t(i)] = in[i - off];
    // tokens[s + 1] (Argmax's output) is the input of the next step: tagged with that step's epoch.
    if (flagged(i)) tag[size_t(i)] = cur_epoch() + (i >= tokens ? 1u : 0u);
  }
  return true;
}

void Simulator::State::host_write(int64_t off, float v) {
  readers[size_t(off)].clear();
  writer[size_t(off)] = Access{-2, 0};
  mem[size_t(off)] = v;
  tag[size_t(off)] = epoch;  // the host writes the launch's first input (tokens[0])
}

Simulator::Simulator(const ModelConfig& config, const Weights& weights, Schedule schedule, Protocol protocol)
    : st_(std::make_unique<State>()) {
  st_->init(config, weights, std::move(schedule));
  st_->protocol = protocol;
}
Simulator::~Simulator() = default;
uint32_t Simulator::epoch() const { return st_->epoch; }
const Schedule& Simulator::schedule() const { return st_->schedule; }

void Simulator::preload_current_pos_for_test() { st_->prewait_through_pos = true; }
void Simulator::skip_flag_polls_for_test(Op op) { st_->skip_polls_op = op; }
void Simulator::drop_step_barrier_for_test() { st_->no_step_barrier = true; }
void Simulator::extra_lm_claim_for_test() { st_->extra_lm_claim = true; }
void Simulator::skip_acc_clear_for_test(bool resid_only) { st_->skip_acc_clear = resid_only ? 2 : 1; }

int Simulator::State::acc_slot_read(const Instr& in) const {
  const Layout& L = schedule.layout;
  if (!mid_acc()) return -1;
  if (in.op == Op::MlpGateUp || in.op == Op::MlpGateUpDown) return in.layer;
  if (!resid_acc(L)) return -1;
  if (in.op == Op::QkvProj && in.layer >= 1) return resid_acc_slot(L, in.layer - 1);
  if (in.op == Op::LmHead) return resid_acc_slot(L, L.n_layer - 1);
  return -1;
}

std::string Simulator::State::acc_name(int slot) const {
  const int n_layer = schedule.layout.n_layer;
  return slot < n_layer ? cat("resid_mid[layer ", slot, "]") : cat("resid_in(", slot - n_layer + 1, ")");
}

bool Simulator::State::acc_add(int slot, int64_t b, int64_t n, const float* v) {
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = acc_index(cur_epoch(), slot, b + i);
    if (acc_tag[k] != NO_TAG && acc_tag[k] != cur_epoch()) {
      error = cat(where(), " adds to ", acc_name(slot), " element ", b + i, "'s accumulator word, which still ",
                  "holds step epoch ", acc_tag[k], "'s sum (not cleared)");
      return false;
    }
    if (mid_acc_count(acc[k]) >= acc_count(slot)) {
      error = cat(where(), " adds a contribution too many to ", acc_name(slot), " element ", b + i);
      return false;
    }
    acc[k] += mid_acc_word(v[i]);
    acc_tag[k] = cur_epoch();
  }
  return true;
}

bool Simulator::State::acc_complete(int slot) const {
  for (int64_t i = 0; i < schedule.layout.n_embd; ++i)
    if (mid_acc_count(acc[acc_index(cur_epoch(), slot, i)]) != acc_count(slot)) return false;
  return true;
}

bool Simulator::State::acc_take(const Instr& in, float* x) {
  const int slot = acc_slot_read(in);
  for (int64_t i = 0; i < schedule.layout.n_embd; ++i) {
    const size_t k = acc_index(cur_epoch(), slot, i);
    if (acc_tag[k] != cur_epoch() || mid_acc_count(acc[k]) != acc_count(slot)) {
      error = cat(where(), " reads ", acc_name(slot), " element ", i, "'s accumulator word holding step epoch ",
                  int64_t(acc_tag[k]), "'s sum, not this step's ", cur_epoch());
      return false;
    }
    x[i] = mid_acc_value(acc[k]);
  }
  if (skip_acc_clear == 1 || (skip_acc_clear == 2 && slot >= schedule.layout.n_layer)) return true;
  for (int64_t i = in.aux_begin; i < int64_t(in.aux_end); ++i) {
    const size_t k = acc_index(cur_epoch() + 1u, slot, i);
    if (acc_tag[k] == cur_epoch() + 1u) {
      error = cat(where(), " clears ", acc_name(slot), " element ", i, "'s accumulator word after the next ",
                  "step's contributions");
      return false;
    }
    acc[k] = 0ull, acc_tag[k] = NO_TAG;
  }
  return true;
}

void Simulator::drop_wait_for_test(Op op, int index) {
  for (auto& q : st_->schedule.queues)
    for (Instr& in : q)
      if (in.op == op && index < in.n_waits) {
        for (int i = index; i + 1 < in.n_waits; ++i) in.waits[i] = in.waits[i + 1];
        --in.n_waits;
      }
}

namespace {

void join(std::vector<uint32_t>& into, const std::vector<uint32_t>& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

}  // namespace

Expected<SimResult> Simulator::launch(int32_t token, int pos, int n_steps, uint64_t seed, bool round_robin,
                                     const SampleParams& sample, const StopIds& stops) {
  State& s = *st_;
  const Layout& L = s.schedule.layout;
  if (!(sample.temperature >= 0.f) || !(sample.min_p >= 0.f && sample.min_p <= 1.f))
    return make_error("megakernel sim: temperature ", sample.temperature, " must be >= 0 and min_p ", sample.min_p,
                      " in [0, 1]");
  if (n_steps < 1 || n_steps > State::MAX_STEPS)
    return make_error("megakernel sim: n_steps = ", n_steps, ", expected 1..", State::MAX_STEPS);
  if (pos < 0 || pos + n_steps > L.max_context)
    return make_error("megakernel sim: positions [", pos, ", ", pos + n_steps, ") exceed the context of ",
                      L.max_context);
  if (token < 0 || token >= L.n_vocab)
    return make_error("megakernel sim: token ", token, " outside the vocabulary [0, ", L.n_vocab, ")");
  if (stops.n < 0 || stops.n > MAX_STOP_IDS)
    return make_error("megakernel sim: ", stops.n, " stop ids, expected 0..", MAX_STOP_IDS);
  // Kernel boundary: everything before the launch happened before everything in it.
  const int n_sm = s.schedule.n_sm();
  std::vector<uint32_t> all(size_t(n_sm), 0);
  for (auto& c : s.clock) join(all, c);
  for (auto& c : s.clock) c = all;
  s.cur = nullptr;
  s.sample = sample;
  s.host_write(s.tokens, float(token));

  std::vector<size_t> pc(size_t(n_sm), 0);   // next instruction in the SM's queue
  std::vector<int> step(size_t(n_sm), 0);    // step of that instruction
  std::vector<int> order(static_cast<size_t>(n_sm));
  std::mt19937_64 rng(seed);
  SimResult res;
  auto done = [&](int sm) { return step[size_t(sm)] >= n_steps; };
  auto advance = [&](int sm) {  // skip to the next instruction, wrapping into the next step
    if (++pc[size_t(sm)] >= s.schedule.queues[size_t(sm)].size()) pc[size_t(sm)] = 0, ++step[size_t(sm)];
  };
  for (int sm = 0; sm < n_sm; ++sm)
    if (s.schedule.queues[size_t(sm)].empty()) step[size_t(sm)] = n_steps;
  std::vector<int> synced_step(size_t(n_sm), -1);  // the step in which the SM last passed a wait
  std::vector<int> stopped(size_t(n_sm), -1);      // the step at which the SM found a stop id as its input
  // The stop check (isa.h StopIds) before SM sm's first instruction of step >= 1: the step's input token as the
  // device reads it, a flagged pair valid once it holds the step's epoch (in both protocols: no happens-before needed,
  // hence not State::read). "" when it can go on (sets *stop), else what it polls.
  auto stop_check = [&](int sm, bool* stop) -> std::string {
    *stop = false;
    const int st = step[size_t(sm)];
    if (stops.n == 0 || st == 0 || pc[size_t(sm)] != 0) return "";
    const int64_t at = s.tokens + st;
    if (s.tag[size_t(at)] != s.epoch + uint32_t(st)) return cat("polls tokens[", st, "] (stop check)");
    *stop = stops.has(int32_t(s.mem[size_t(at)]));
    return "";
  };
  // Runs the stop check; true when the SM stopped (it is then done) or is blocked (*blocked).
  auto stop_here = [&](int sm, bool* blocked) {
    bool stop = false;
    *blocked = !stop_check(sm, &stop).empty();
    if (stop) stopped[size_t(sm)] = step[size_t(sm)], step[size_t(sm)] = n_steps;
    return stop || *blocked;
  };
  // Tries to run SM sm's next instruction; false when a wait is unsatisfied.
  const bool flags = s.protocol == Protocol::Flags;
  std::vector<std::pair<int64_t, int64_t>> polls;
  // The flag protocol's blocking condition, or "" when the instruction can run (as the device: the step
  // barrier before an SM's first instruction of a step, then the pairs the instruction reads).
  auto flag_block = [&](int sm, const Instr& in, uint64_t epoch) -> std::string {
    if (pc[size_t(sm)] == 0 && !s.no_step_barrier && s.step_counter < epoch * uint64_t(s.n_active))
      return cat("step barrier ", s.step_counter, "/", epoch * uint64_t(s.n_active));
    if (in.op == s.skip_polls_op) return "";
    s.cur_sm = sm, s.cur_step = step[size_t(sm)], s.cur_pos = pos + s.cur_step, s.cur = &in;
    if (const int slot = s.acc_slot_read(in); slot >= 0 && !s.acc_complete(slot))  // the device's poll condition
      return cat("polls ", s.acc_name(slot), "'s accumulator");
    polls.clear();
    s.flag_polls(in, polls);
    for (auto [off, n] : polls)
      for (int64_t i = off; i < off + n; ++i)
        if (s.tag[size_t(i)] != s.cur_epoch()) return cat("polls ", s.region(i));
    return "";
  };
  auto try_run_flags = [&](int sm, const Instr& in, uint64_t epoch) -> bool {
    if (pc[size_t(sm)] == 0 && !s.no_step_barrier) {
      if (s.step_counter < epoch * uint64_t(s.n_active)) return false;
      join(s.clock[size_t(sm)], s.step_clock);  // acquire: every SM's earlier steps happened before
    }
    bool blocked = false;
    if (stop_here(sm, &blocked)) return !blocked;
    s.cur_sm = sm, s.cur_step = step[size_t(sm)], s.cur_pos = pos + s.cur_step, s.cur = &in;
    // The attention preload runs after the step barrier (the device issues it before polling its inputs).
    const bool attn = in.op == Op::AttnPartial || (in.op == Op::AttnOProj && L.n_chunks == 1);
    if (attn && !s.check_prewait_kv(in)) return true;  // s.error ends the run
    if (!flag_block(sm, in, epoch).empty()) return false;
    s.cur_sm = sm, s.cur_step = step[size_t(sm)], s.cur_pos = pos + s.cur_step, s.cur = &in;
    s.clock[size_t(sm)][size_t(sm)] = ++s.seq[size_t(sm)];
    if (!s.execute()) return true;
    ++res.n_executed;
    advance(sm);
    if (pc[size_t(sm)] == 0) {  // the SM's last instruction of the step: release the step barrier
      join(s.step_clock, s.clock[size_t(sm)]);
      ++s.step_counter;
    }
    return true;
  };
  auto try_run = [&](int sm) -> bool {
    const Instr& in = s.schedule.queues[size_t(sm)][pc[size_t(sm)]];
    const uint64_t epoch = s.epoch + uint64_t(step[size_t(sm)]);
    if (flags) return try_run_flags(sm, in, epoch);
    bool blocked = false;
    if (stop_here(sm, &blocked)) return !blocked;
    // The device's attention preload: cached K/V read before the wait (at a launch's first step, or once
    // the SM passed a wait of this step). Checked with the clock before this instruction's waits.
    const bool attn = in.op == Op::AttnPartial || (in.op == Op::AttnOProj && L.n_chunks == 1);
    if (attn && (step[size_t(sm)] == 0 || synced_step[size_t(sm)] == step[size_t(sm)])) {
      s.cur_sm = sm, s.cur_step = step[size_t(sm)], s.cur_pos = pos + s.cur_step, s.cur = &in;
      if (!s.check_prewait_kv(in)) return true;  // s.error ends the run
    }
    // A greedy launch's SamplePartial only signals (as the device's): no wait.
    const int n_waits = in.op == Op::SamplePartial && !(s.sample.temperature > 0.f) ? 0 : in.n_waits;
    for (int w = 0; w < n_waits; ++w) {
      const Wait& wt = in.waits[w];
      uint64_t target = (epoch + 1 - wt.lag) * wt.count;
      if (s.counter[wt.counter] < target) return false;
    }
    if (n_waits > 0) synced_step[size_t(sm)] = step[size_t(sm)];
    // Acquire: the waits saw the counters, so their producers' clocks join ours.
    for (int w = 0; w < n_waits; ++w) join(s.clock[size_t(sm)], s.counter_clock[in.waits[w].counter]);
    s.cur_sm = sm, s.cur_step = step[size_t(sm)], s.cur_pos = pos + s.cur_step, s.cur = &in;
    s.clock[size_t(sm)][size_t(sm)] = ++s.seq[size_t(sm)];
    if (!s.execute()) return true;
    // Release: the increment publishes everything this SM has seen and done.
    join(s.counter_clock[in.signal], s.clock[size_t(sm)]);
    ++s.counter[in.signal];
    ++res.n_executed;
    advance(sm);
    return true;
  };
  std::uniform_int_distribution<int> burst(1, 4);
  while (s.error.empty()) {
    for (int sm = 0; sm < n_sm; ++sm) order[size_t(sm)] = sm;
    if (!round_robin) std::shuffle(order.begin(), order.end(), rng);
    bool progress = false, any_left = false;
    for (int sm : order) {
      int n = round_robin ? 1 : burst(rng);
      for (int i = 0; i < n && !done(sm) && s.error.empty(); ++i) {
        if (!try_run(sm)) {
          ++res.n_blocked;
          break;
        }
        progress = true;
      }
      any_left |= !done(sm);
    }
    if (!any_left) break;
    if (!progress && s.error.empty()) {
      std::string msg = cat("megakernel sim: deadlock with ", n_sm, " SMs:");
      for (int sm = 0; sm < n_sm; ++sm) {
        if (done(sm)) continue;
        const Instr& in = s.schedule.queues[size_t(sm)][pc[size_t(sm)]];
        const bool at_barrier = flags && pc[size_t(sm)] == 0 && !s.no_step_barrier &&
                                s.step_counter < (s.epoch + uint64_t(step[size_t(sm)])) * uint64_t(s.n_active);
        bool stop = false;
        if (std::string why = at_barrier ? "" : stop_check(sm, &stop); !why.empty()) {
          msg += cat(" [SM ", sm, " step ", step[size_t(sm)], " ", why, "]");
          continue;
        }
        if (flags) {
          msg += cat(" [SM ", sm, " step ", step[size_t(sm)], " ", op_name(in.op), " layer ", in.layer, " ",
                     flag_block(sm, in, s.epoch + uint64_t(step[size_t(sm)])), "]");
          continue;
        }
        msg += cat(" [SM ", sm, " step ", step[size_t(sm)], " ", op_name(in.op), " layer ", in.layer, " waits");
        for (int w = 0; w < in.n_waits; ++w)
          msg += cat(" c", in.waits[w].counter, "=", s.counter[in.waits[w].counter], "/",
                     (s.epoch + step[size_t(sm)] + 1 - in.waits[w].lag) * in.waits[w].count);
        msg += "]";
      }
      return make_error(msg);
    }
  }
  if (!s.error.empty()) return make_error("megakernel sim: ", s.error);
  // Steps run: n_steps, or the step at which the SMs found a stop id -- the same for every SM with a queue.
  int ran = -1;
  for (int sm = 0; sm < n_sm; ++sm) {
    if (s.schedule.queues[size_t(sm)].empty()) continue;
    const int r = stopped[size_t(sm)] >= 0 ? stopped[size_t(sm)] : n_steps;
    if (ran >= 0 && r != ran)
      return make_error("megakernel sim: the SMs disagree on the stop: SM ", sm, " ran ", r, " steps, another ", ran);
    ran = r;
  }
  if (ran < 0) ran = n_steps;
  s.epoch += uint32_t(ran);
  s.cur = nullptr;
  res.tokens.resize(size_t(ran));
  for (int i = 0; i < ran; ++i) res.tokens[size_t(i)] = int32_t(s.mem[size_t(s.tokens + i + 1)]);
  res.logits.assign(s.mem.begin() + L.logits, s.mem.begin() + L.logits + L.n_vocab);
  return res;
}

}  // namespace mk::megakernel
