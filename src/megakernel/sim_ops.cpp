// The simulator's instructions (isa.h): each reads and writes simulated memory only through the
// checked State::read / State::write and computes with the CPU reference ops (cpu/ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/ops.h"
#include "megakernel/sim.h"
#include "megakernel/sim_state.h"

namespace mk::megakernel {

namespace {

using Vec = std::vector<float>;

// resid_in(l): the residual stream entering layer l (l = n_layer: entering the final norm), summed in
// the same fixed order by every reader -- or, with the fused MLP's accumulator (isa.h resid_acc), its fixed-point
// sum, taken by the current instruction (which clears its aux slice of the other parity).
bool residual_in(Simulator::State& s, int l, Vec& x) {
  const Layout& L = s.schedule.layout;
  x.assign(size_t(L.n_embd), 0.f);
  if (l == 0) {
    float tok = 0;
    if (!s.read(s.tokens + s.cur_step, 1, &tok)) return false;
    cpu::embed(x.data(), s.weights->tok_embd, int32_t(tok));
    return true;
  }
  if (s.acc_slot_read(*s.cur) >= 0) return s.acc_take(*s.cur, x.data());
  Vec part(static_cast<size_t>(L.n_embd));
  if (L.mid_resid) {  // resid[l-1] + sum_g o_part[l-1][g], already summed in this order by MlpGateUp
    if (!s.read(L.resid_mid + int64_t(l - 1) * L.n_embd, L.n_embd, x.data())) return false;
  } else {
    if (!s.read(L.resid + int64_t(l - 1) * L.n_embd, L.n_embd, x.data())) return false;
    for (int g = 0; g < L.n_kv_head; ++g) {
      if (!s.read(L.o_part + (int64_t(l - 1) * L.n_kv_head + g) * L.n_embd, L.n_embd, part.data())) return false;
      cpu::add(x.data(), x.data(), part.data(), L.n_embd);
    }
  }
  for (int p = 0; p < L.n_down_parts; ++p) {
    if (!s.read(L.down + (int64_t(l - 1) * L.n_down_parts + p) * L.n_embd, L.n_embd, part.data())) return false;
    cpu::add(x.data(), x.data(), part.data(), L.n_embd);
  }
  return true;
}

bool qkv_proj(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  const LayerWeights& w = s.weights->layers[in.layer];
  Vec x, xn(static_cast<size_t>(L.n_embd)), out(static_cast<size_t>(L.qkv_dim));
  if (!residual_in(s, in.layer, x)) return false;
  if (in.aux_end > in.aux_begin &&
      !s.write(L.resid + int64_t(in.layer) * L.n_embd + in.aux_begin, in.aux_end - in.aux_begin, x.data() + in.aux_begin))
    return false;
  // Flags + mid_resid: the slice is also resid_mid[l]'s first contribution (the device stores only that).
  if (s.mid_acc() && !s.acc_add(in.layer, in.aux_begin, int64_t(in.aux_end) - in.aux_begin, x.data() + in.aux_begin))
    return false;
  cpu::rmsnorm(xn.data(), x.data(), w.attn_norm, s.config.rms_norm_eps, L.n_embd);
  const int q_dim = L.n_head * L.head_dim, kv_dim = L.n_kv_head * L.head_dim;
  // The slice may span the q, k and v matrices: one matvec_rows per overlapped matrix.
  const struct { const TensorView* w; const TensorView* b; int begin, end; } parts[3] = {
      {&w.wq, &w.bq, 0, q_dim}, {&w.wk, &w.bk, q_dim, q_dim + kv_dim}, {&w.wv, &w.bv, q_dim + kv_dim, L.qkv_dim}};
  for (const auto& p : parts) {
    int r0 = std::max<int>(int(in.row_begin), p.begin), r1 = std::min<int>(int(in.row_end), p.end);
    if (r0 < r1) cpu::matvec_rows(out.data() + p.begin, *p.w, xn.data(), r0 - p.begin, r1 - p.begin, p.b);
  }
  return s.write(L.qkv + int64_t(in.layer) * L.qkv_dim + in.row_begin, in.row_end - in.row_begin,
                 out.data() + in.row_begin);
}

// Partial attention of kv group g over positions [p0, p1) ∩ [0, pos]: per q head j of the group,
// o[j] (unnormalised), max score m[j], sum of exp s[j]. Position pos uses this step's k/v (computed
// here from qkv); with `append`, this instruction also stores them in the cache.
struct Partial {
  Vec o, m, sum;  // [group][head_dim], [group], [group]
};
bool attend(Simulator::State& s, int layer, int g, int p0, int p1, bool append, Partial& out) {
  const Layout& L = s.schedule.layout;
  const LayerWeights& w = s.weights->layers[size_t(layer)];
  const int hd = L.head_dim, q_dim = L.n_head * hd, kv_dim = L.n_kv_head * hd, pos = s.cur_pos;
  const int64_t qkv = L.qkv + int64_t(layer) * L.qkv_dim;
  Vec q(static_cast<size_t>(L.group * hd)), k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));
  if (!s.read(qkv + int64_t(g) * L.group * hd, L.group * hd, q.data())) return false;
  if (!s.read(qkv + q_dim + g * hd, hd, k.data())) return false;
  if (!s.read(qkv + q_dim + kv_dim + g * hd, hd, v.data())) return false;
  for (int j = 0; j < L.group; ++j) {
    float* qj = q.data() + j * hd;
    if (w.q_norm.present()) cpu::rmsnorm(qj, qj, w.q_norm, s.config.rms_norm_eps, hd);
    cpu::rope(qj, 1, hd, pos, s.inv_freq.data());
  }
  if (w.k_norm.present()) cpu::rmsnorm(k.data(), k.data(), w.k_norm, s.config.rms_norm_eps, hd);
  cpu::rope(k.data(), 1, hd, pos, s.inv_freq.data());
  auto cache_at = [&](int64_t base, int p) { return base + ((int64_t(layer) * L.max_context + p) * L.n_kv_head + g) * hd; };
  if (append && p0 <= pos && pos < p1) {
    if (!s.write(cache_at(s.k_cache, pos), hd, k.data()) || !s.write(cache_at(s.v_cache, pos), hd, v.data()))
      return false;
  }
  out.o.assign(size_t(L.group * hd), 0.f);
  out.m.assign(size_t(L.group), -std::numeric_limits<float>::infinity());
  out.sum.assign(size_t(L.group), 0.f);
  const int end = std::min(p1, pos + 1);
  if (p0 >= end) return true;
  std::vector<Vec> ks, vs;
  for (int p = p0; p < end; ++p) {
    Vec kp(static_cast<size_t>(hd)), vp(static_cast<size_t>(hd));
    if (p == pos) {
      kp = k, vp = v;
    } else if (!s.read(cache_at(s.k_cache, p), hd, kp.data()) || !s.read(cache_at(s.v_cache, p), hd, vp.data())) {
      return false;
    }
    ks.push_back(std::move(kp)), vs.push_back(std::move(vp));
  }
  const float scale = 1.f / std::sqrt(float(hd));
  for (int j = 0; j < L.group; ++j) {
    Vec score(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      float d = 0;
      for (int e = 0; e < hd; ++e) d += q[size_t(j * hd + e)] * ks[i][size_t(e)];
      score[i] = d * scale;
      out.m[size_t(j)] = std::max(out.m[size_t(j)], score[i]);
    }
    for (size_t i = 0; i < ks.size(); ++i) {
      float p = std::exp(score[i] - out.m[size_t(j)]);
      out.sum[size_t(j)] += p;
      for (int e = 0; e < hd; ++e) out.o[size_t(j * hd + e)] += p * vs[i][size_t(e)];
    }
  }
  return true;
}

bool attn_partial(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  Partial p;
  int p0, p1;
  attn_chunk_range(L, int(in.row_begin), int(in.row_end), in.chunk, s.cur_pos, p0, p1);
  if (!attend(s, in.layer, in.group, p0, p1, /*append=*/true, p)) return false;
  Vec rec(static_cast<size_t>(L.att_part_stride));  // per head: o[head_dim], m, sum
  for (int j = 0; j < L.group; ++j) {
    float* r = rec.data() + j * (L.head_dim + 2);
    std::copy_n(p.o.data() + j * L.head_dim, L.head_dim, r);
    r[L.head_dim] = p.m[size_t(j)], r[L.head_dim + 1] = p.sum[size_t(j)];
  }
  int64_t off = L.att_part + ((int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks + in.chunk) * L.att_part_stride;
  return s.write(off, L.att_part_stride, rec.data());
}

bool attn_o_proj(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  const int hd = L.head_dim, gw = L.group * hd;
  Vec attn(static_cast<size_t>(L.n_head * hd), 0.f);  // [n_head * head_dim], zero outside this group
  float* o = attn.data() + int64_t(in.group) * gw;
  if (L.n_chunks == 1) {
    Partial p;
    if (!attend(s, in.layer, in.group, 0, L.max_context, (in.flags & FLAG_APPEND_KV) != 0, p)) return false;
    for (int j = 0; j < L.group; ++j)
      for (int e = 0; e < hd; ++e) o[j * hd + e] = p.o[size_t(j * hd + e)] / p.sum[size_t(j)];
  } else {
    // Merge the chunks' partials in chunk order (deterministic): rescale each to the global max.
    Vec rec(static_cast<size_t>(L.att_part_stride) * size_t(L.n_chunks));
    int64_t off = L.att_part + (int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks * L.att_part_stride;
    if (!s.read(off, int64_t(L.att_part_stride) * L.n_chunks, rec.data())) return false;
    for (int j = 0; j < L.group; ++j) {
      auto at = [&](int c) { return rec.data() + int64_t(c) * L.att_part_stride + j * (hd + 2); };
      float m = -std::numeric_limits<float>::infinity(), sum = 0;
      for (int c = 0; c < L.n_chunks; ++c) m = std::max(m, at(c)[hd]);
      for (int c = 0; c < L.n_chunks; ++c) {
        if (at(c)[hd + 1] == 0.f) continue;  // empty chunk
        float f = std::exp(at(c)[hd] - m);
        sum += f * at(c)[hd + 1];
        for (int e = 0; e < hd; ++e) o[j * hd + e] += f * at(c)[e];
      }
      for (int e = 0; e < hd; ++e) o[j * hd + e] /= sum;
    }
  }
  Vec out(static_cast<size_t>(L.n_embd));
  cpu::matvec_rows(out.data(), s.weights->layers[in.layer].wo, attn.data(), in.row_begin, in.row_end);
  int64_t off = L.o_part + (int64_t(in.layer) * L.n_kv_head + in.group) * L.n_embd + in.row_begin;
  if (!s.write(off, in.row_end - in.row_begin, out.data() + in.row_begin)) return false;
  // Flags + mid_resid: the rows are also the group's contribution to resid_mid[l] (the device stores only that).
  return !s.mid_acc() || s.acc_add(in.layer, in.row_begin, int64_t(in.row_end) - in.row_begin, out.data() + in.row_begin);
}

// act[rows] of layer l = silu(gate x) * up x, x = rmsnorm(resid[l] + sum_g o_part[l][g]); into
// act (whole [n_ff] vector, rows filled). MlpGateUp under flags + mid_resid takes x from the accumulator its
// contributors added to, as the device (isa.h mid_acc_word: fixed point, order-free); the other modes sum in float in
// this order. The aux slice of x is materialised as resid_mid[l] or, with the fused MLP's accumulator (isa.h
// resid_acc), added to resid_in(l + 1)'s words as this instruction's first contribution there.
bool gate_up_rows(Simulator::State& s, const Instr& in, Vec& act) {
  const Layout& L = s.schedule.layout;
  const LayerWeights& w = s.weights->layers[in.layer];
  Vec x(static_cast<size_t>(L.n_embd)), part(static_cast<size_t>(L.n_embd)), xn(static_cast<size_t>(L.n_embd)), up(static_cast<size_t>(L.n_ff));
  act.assign(size_t(L.n_ff), 0.f);
  Vec& gate = act;
  if (s.acc_slot_read(in) >= 0) {  // the accumulator's sums (isa.h mid_acc_word)
    if (!s.acc_take(in, x.data())) return false;
  } else {
    if (!s.read(L.resid + int64_t(in.layer) * L.n_embd, L.n_embd, x.data())) return false;
    for (int g = 0; g < L.n_kv_head; ++g) {
      if (!s.read(L.o_part + (int64_t(in.layer) * L.n_kv_head + g) * L.n_embd, L.n_embd, part.data())) return false;
      cpu::add(x.data(), x.data(), part.data(), L.n_embd);
    }
  }
  const int64_t b = in.aux_begin, n_aux = int64_t(in.aux_end) - b;
  if (n_aux > 0 && !(s.resid_acc_on() ? s.acc_add(resid_acc_slot(L, in.layer), b, n_aux, x.data() + b)
                                      : s.write(L.resid_mid + int64_t(in.layer) * L.n_embd + b, n_aux, x.data() + b)))
    return false;
  cpu::rmsnorm(xn.data(), x.data(), w.mlp_norm, s.config.rms_norm_eps, L.n_embd);
  cpu::matvec_rows(gate.data(), w.w_gate, xn.data(), in.row_begin, in.row_end);
  cpu::matvec_rows(up.data(), w.w_up, xn.data(), in.row_begin, in.row_end);
  int n = int(in.row_end - in.row_begin);
  cpu::swiglu(gate.data() + in.row_begin, gate.data() + in.row_begin, up.data() + in.row_begin, n);
  return true;
}

bool mlp_gate_up(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  Vec act;
  if (!gate_up_rows(s, in, act)) return false;
  return s.write(L.act + int64_t(in.layer) * L.n_ff + in.row_begin, in.row_end - in.row_begin,
                 act.data() + in.row_begin);
}

// Fused MLP: the rows' activations stay local; their split-K contribution to the down projection,
// w_down[:, rows] . act[rows] (act zero outside rows), is this instruction's partial down[l][part] -- or, with the
// accumulator (isa.h resid_acc), its contribution to resid_in(l + 1)'s words.
bool mlp_gate_up_down(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  Vec act, out(static_cast<size_t>(L.n_embd));
  if (!gate_up_rows(s, in, act)) return false;
  cpu::matvec_rows(out.data(), s.weights->layers[in.layer].w_down, act.data(), 0, L.n_embd);
  if (s.resid_acc_on()) return s.acc_add(resid_acc_slot(L, in.layer), 0, L.n_embd, out.data());
  return s.write(L.down + (int64_t(in.layer) * L.n_down_parts + in.chunk) * L.n_embd, L.n_embd, out.data());
}

bool mlp_down(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  Vec act(static_cast<size_t>(L.n_ff)), out(static_cast<size_t>(L.n_embd));
  if (!s.read(L.act + int64_t(in.layer) * L.n_ff, L.n_ff, act.data())) return false;
  cpu::matvec_rows(out.data(), s.weights->layers[in.layer].w_down, act.data(), in.row_begin, in.row_end);
  return s.write(L.down + int64_t(in.layer) * L.n_embd + in.row_begin, in.row_end - in.row_begin,
                 out.data() + in.row_begin);
}

// The rows an LmHead instruction computes: its static rows, or with the dynamic LM head (Layout::lm_unit_rows) its
// static units and then the units it claims from the step's range of the claim counter (isa.h) until a claim
// overshoots -- here at once, as if this SM's loader won every race for them (a valid interleaving of the device).
bool lm_rows(Simulator::State& s, const Instr& in, std::vector<std::pair<int, int>>& rows) {
  const Layout& L = s.schedule.layout;
  rows.clear();
  if (L.lm_unit_rows == 0) return rows.emplace_back(int(in.row_begin), int(in.row_end)), true;
  auto unit = [&](int u) { rows.emplace_back(u * L.lm_unit_rows, std::min(L.n_vocab, (u + 1) * L.lm_unit_rows)); };
  for (int k = 0; k < L.lm_static; ++k)
    if (int(in.chunk) * L.lm_static + k < L.lm_units) unit(int(in.chunk) * L.lm_static + k);
  const uint64_t per = uint64_t(L.lm_claims_per_step()), base = uint64_t(s.cur_epoch()) * per;
  for (;;) {
    if (s.lm_claim < base || s.lm_claim >= base + per) {
      s.error = cat(s.where(), " claims LM-head unit ", s.lm_claim, " outside its step's range [", base, ", ", base + per, ")");
      return false;
    }
    const int64_t c = int64_t(s.lm_claim++ - base);
    if (c >= L.lm_dynamic_units()) break;  // the overshoot: every instruction makes exactly one
    unit(L.n_lm_slices * L.lm_static + int(c));
  }
  if (s.extra_lm_claim) ++s.lm_claim;
  return true;
}

// (value, index) beats (best value, best index): the larger value, NaN the largest, the smaller index on ties
// (the device's argmax_better; cpu::argmax / torch.argmax pick the first maximum).
bool argmax_better(float v, int i, float bv, int bi) {
  if (std::isnan(bv)) return std::isnan(v) && i < bi;
  if (std::isnan(v)) return true;
  return v > bv || (v == bv && i < bi);
}

bool lm_head(Simulator::State& s, const Instr& in) {
  const Layout& L = s.schedule.layout;
  Vec x, xn(static_cast<size_t>(L.n_embd)), logits(static_cast<size_t>(L.n_vocab));
  if (!residual_in(s, L.n_layer, x)) return false;
  cpu::rmsnorm(xn.data(), x.data(), s.weights->final_norm, s.config.rms_norm_eps, L.n_embd);
  const TensorView& head = s.weights->lm_head.present() ? s.weights->lm_head : s.weights->tok_embd;
  std::vector<std::pair<int, int>> rows;
  if (!lm_rows(s, in, rows)) return false;
  float best = -std::numeric_limits<float>::infinity();
  int best_i = L.n_vocab;  // no rows: loses to every real candidate
  for (auto [r0, r1] : rows) {
    cpu::matvec_rows(logits.data(), head, xn.data(), r0, r1);
    if (!s.write(L.logits + r0, r1 - r0, logits.data() + r0)) return false;
    const int i = r0 + cpu::argmax(logits.data() + r0, r1 - r0);
    if (argmax_better(logits[size_t(i)], i, best, best_i)) best = logits[size_t(i)], best_i = i;
  }
  float rec[2] = {best, float(best_i)};
  return s.write(L.amax + 2 * int64_t(in.chunk), 2, rec);
}

// The dynamic LM head: every LmHead instruction of the step has claimed past the last unit exactly once.
bool check_lm_claims(Simulator::State& s) {
  const Layout& L = s.schedule.layout;
  if (L.lm_unit_rows > 0 && s.lm_claim != uint64_t(s.cur_epoch() + 1) * uint64_t(L.lm_claims_per_step())) {
    s.error = cat(s.where(), ": the LM-head claim counter is at ", s.lm_claim, ", expected ",
                  uint64_t(s.cur_epoch() + 1) * uint64_t(L.lm_claims_per_step()));
    return false;
  }
  return true;
}

// The LM-head slice whose (value, index) record wins (argmax_better) among rec[2 n].
int best_record(const Vec& rec, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (argmax_better(rec[size_t(2 * i)], int(rec[size_t(2 * i + 1)]), rec[size_t(2 * best)], int(rec[size_t(2 * best + 1)])))
      best = i;
  return best;
}

// A sampled launch's range of the draw (isa.h SamplePartial): m from the LM head's records (the max finite logit
// when the best is finite; otherwise every logit read for it), the range's weight sum -> sample_part[chunk].
// A greedy launch skips it.
bool sample_partial(Simulator::State& s, const Instr& in) {
  if (!(s.sample.temperature > 0.f)) return true;
  const Layout& L = s.schedule.layout;
  Vec rec(static_cast<size_t>(2 * L.n_lm_slices)), logits(static_cast<size_t>(L.n_vocab));
  if (!s.read(L.amax, 2 * L.n_lm_slices, rec.data())) return false;
  float m = rec[size_t(2 * best_record(rec, L.n_lm_slices))];
  if (!std::isfinite(m)) {
    if (!s.read(L.logits, L.n_vocab, logits.data())) return false;
    m = sample_max(logits.data(), L.n_vocab);
  }
  const int r0 = int(in.row_begin), r1 = int(in.row_end);
  if (!s.read(L.logits + r0, r1 - r0, logits.data() + r0)) return false;
  const SamplePart part = sample_part_sum(logits.data(), L.n_vocab, r0, r1, m, s.sample);
  float out[4] = {0, 0, float(part.kept), m};
  std::memcpy(out, &part.sum, sizeof(double));  // the double's bits in two floats, as the device
  return s.write(L.sample_part + 4 * int64_t(in.chunk), 4, out);
}

bool argmax(Simulator::State& s, const Instr&) {
  const Layout& L = s.schedule.layout;
  if (!check_lm_claims(s)) return false;
  int32_t t = -1;
  if (s.sample.temperature > 0.f) {  // a sampled launch: the draw over the ranges' sums, then one range (isa.h)
    Vec rec(static_cast<size_t>(4 * L.n_sample_parts));
    if (!s.read(L.sample_part, 4 * L.n_sample_parts, rec.data())) return false;
    std::vector<SamplePart> parts(static_cast<size_t>(L.n_sample_parts));
    for (size_t k = 0; k < parts.size(); ++k) {
      std::memcpy(&parts[k].sum, &rec[4 * k], sizeof(double));
      parts[k].kept = int32_t(rec[4 * k + 2]);
    }
    const float m = rec[3];
    double target = 0;
    const int k = sample_pick_part(parts, s.sample, s.sample.first_draw + uint64_t(s.cur_step), &target);
    if (k < 0) {  // u * total rounded past the last range: the last kept id of all
      for (const SamplePart& p : parts) t = std::max(t, p.kept);
    } else {
      int r0, r1;
      L.sample_part_range(k, r0, r1);
      Vec logits(static_cast<size_t>(L.n_vocab));
      if (!s.read(L.logits + r0, r1 - r0, logits.data() + r0)) return false;
      t = sample_pick_in_part(logits.data(), L.n_vocab, r0, r1, m, s.sample, target, parts[size_t(k)].kept);
    }
    if (t < 0) {
      s.error = cat(s.where(), ": no finite logit to sample from");
      return false;
    }
  } else {
    Vec rec(static_cast<size_t>(2 * L.n_lm_slices));
    if (!s.read(L.amax, 2 * L.n_lm_slices, rec.data())) return false;
    t = int32_t(rec[size_t(2 * best_record(rec, L.n_lm_slices) + 1)]);
  }
  const float tf = float(t);
  return s.write(s.tokens + s.cur_step + 1, 1, &tf);
}

}  // namespace

bool Simulator::State::execute() {
  switch (cur->op) {
    case Op::QkvProj: return qkv_proj(*this, *cur);
    case Op::AttnPartial: return attn_partial(*this, *cur);
    case Op::AttnOProj: return attn_o_proj(*this, *cur);
    case Op::MlpGateUp: return mlp_gate_up(*this, *cur);
    case Op::MlpDown: return mlp_down(*this, *cur);
    case Op::LmHead: return lm_head(*this, *cur);
    case Op::Argmax: return argmax(*this, *cur);
    case Op::SamplePartial: return sample_partial(*this, *cur);
    case Op::MlpGateUpDown: return mlp_gate_up_down(*this, *cur);
    case Op::Nop: return true;
    case Op::Count: break;
  }
  error = cat("unknown opcode ", int(cur->op), " at ", where());
  return false;
}

void Simulator::State::flag_polls(const Instr& in, std::vector<std::pair<int64_t, int64_t>>& out) const {
  const Layout& L = schedule.layout;
  const int64_t E = L.n_embd;
  auto residual_in = [&](int l) {  // residual_in() above
    if (l == 0) return out.emplace_back(tokens + cur_step, 1), void();
    if (resid_acc_on()) return;  // it polls the accumulator (sim.cpp's blocking condition, State::acc_complete)
    if (L.mid_resid) {
      out.emplace_back(L.resid_mid + (l - 1) * E, E);
    } else {
      out.emplace_back(L.resid + (l - 1) * E, E);
      out.emplace_back(L.o_part + (l - 1) * L.n_kv_head * E, L.n_kv_head * E);
    }
    out.emplace_back(L.down + (l - 1) * L.n_down_parts * E, L.n_down_parts * E);
  };
  const int hd = L.head_dim, q_dim = L.n_head * hd, kv_dim = L.n_kv_head * hd;
  const int64_t qkv = L.qkv + int64_t(in.layer) * L.qkv_dim;
  switch (in.op) {
    case Op::QkvProj: residual_in(in.layer); break;
    case Op::AttnPartial:
    case Op::AttnOProj:
      if (in.op == Op::AttnOProj && L.n_chunks > 1) {  // the chunks' partials of this group
        out.emplace_back(L.att_part + (int64_t(in.layer) * L.n_kv_head + in.group) * L.n_chunks * L.att_part_stride,
                         int64_t(L.n_chunks) * L.att_part_stride);
      } else {  // the group's q heads, k and v
        out.emplace_back(qkv + int64_t(in.group) * L.group * hd, L.group * hd);
        out.emplace_back(qkv + q_dim + in.group * hd, hd);
        out.emplace_back(qkv + q_dim + kv_dim + in.group * hd, hd);
      }
      break;
    case Op::MlpGateUp:
    case Op::MlpGateUpDown:
      if (mid_acc()) break;  // it polls the accumulator (sim.cpp's blocking condition, State::acc_complete)
      out.emplace_back(L.resid + in.layer * E, E);
      out.emplace_back(L.o_part + in.layer * L.n_kv_head * E, L.n_kv_head * E);
      break;
    case Op::MlpDown: out.emplace_back(L.act + int64_t(in.layer) * L.n_ff, L.n_ff); break;
    case Op::LmHead: residual_in(L.n_layer); break;
    case Op::SamplePartial:  // a sampled launch's (a greedy one skips it); logits are flagged then (isa.h)
      if (sample.temperature > 0.f) {
        out.emplace_back(L.amax, 2 * int64_t(L.n_lm_slices));
        out.emplace_back(L.logits + in.row_begin, int64_t(in.row_end) - in.row_begin);
      }
      break;
    case Op::Argmax:
      if (sample.temperature > 0.f) {  // the ranges' sums, then the logits of the range that holds the target
        out.emplace_back(L.sample_part, 4 * int64_t(L.n_sample_parts));
        out.emplace_back(L.logits, L.n_vocab);  // (all of them: which range is data-dependent; every one is fresh)
      } else {
        out.emplace_back(L.amax, 2 * int64_t(L.n_lm_slices));
      }
      break;
    case Op::Nop:
    case Op::Count: break;
  }
}

bool Simulator::State::check_prewait_kv(const Instr& in) {
  const Layout& L = schedule.layout;
  const bool split = in.op == Op::AttnPartial;
  int p0 = 0, p1 = L.max_context;
  if (split) attn_chunk_range(L, int(in.row_begin), int(in.row_end), in.chunk, cur_pos, p0, p1);
  // positions < pos only: pos itself (appended this step) is loaded after the wait
  const int end = std::min(p1, prewait_through_pos ? cur_pos + 1 : cur_pos);
  for (int p = p0; p < end; ++p)
    for (int64_t base : {k_cache, v_cache}) {
      const int64_t at = base + ((int64_t(in.layer) * L.max_context + p) * L.n_kv_head + in.group) * L.head_dim;
      for (int64_t i = at; i < at + L.head_dim; ++i) {
        const Access& w = writer[size_t(i)];
        if (w.sm == -1 || !hb(w)) {
          error = cat(where(), " loads ", region(i), " before its dependency wait (as the device's attention preload ",
                      "does) but its writer (SM ", w.sm, " instruction #", w.seq, ") has not happened before");
          return false;
        }
      }
    }
  return true;
}

}  // namespace mk::megakernel
