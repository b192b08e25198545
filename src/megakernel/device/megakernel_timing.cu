// MegakernelBackend's in-kernel timestamps (see megakernel_backend.h set_timing / timing_report): the buffer, and the
// per-op summary of the last launch's last step.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "megakernel/device/interpreter.h"
#include "megakernel/device/megakernel_backend.h"

namespace mk::megakernel {

using cuda::cuda_status;

Status MegakernelBackend::set_timing(bool on) {
  if (!on) {
    if (timing_) MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "megakernel: timing"));
    if (timing_) cudaFree(timing_);
    timing_ = nullptr;
    return {};
  }
  if (timing_) return {};
  const size_t n = schedule_.n_instr() * device::TIMING_FIELDS + size_t(n_sm_) * device::BLOCK_FIELDS;
  void* v = nullptr;
  MK_TRY(cuda_status(cudaMalloc(&v, n * sizeof(unsigned long long)), "megakernel: timing buffer"));
  timing_ = static_cast<unsigned long long*>(v);
  CUDA_CHECK(cudaMemset(timing_, 0, n * sizeof(unsigned long long)));
  return {};
}

namespace {

// One instruction's timestamps: when its matvec began (its compute end when it has none) and how long it ran (ns).
unsigned long long matvec_start(const unsigned long long* r) {
  return r[device::T_MATVEC_START] ? r[device::T_MATVEC_START] : r[device::T_COMPUTE_END];
}
double matvec_ns(const unsigned long long* r) { return double(r[device::T_COMPUTE_END] - matvec_start(r)); }

}  // namespace

// Per op, per SM and step (the launch's last step): microseconds waiting for dependencies, computing
// (of which warp 0 waited for ring pages) and publishing; the step's span; the loader's ring-full stalls.
Expected<std::string> MegakernelBackend::timing_report() {
  if (!timing_) return make_error("megakernel: timing is off (set_timing(true) before the launch)");
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "megakernel: timing"));
  const size_t n_instr = schedule_.n_instr();
  std::vector<unsigned long long> t(n_instr * device::TIMING_FIELDS + size_t(n_sm_) * device::BLOCK_FIELDS);
  CUDA_CHECK(cudaMemcpy(t.data(), timing_, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost));
  std::vector<Instr> instrs;
  std::vector<uint32_t> offsets;
  schedule_.flatten(instrs, offsets);
  constexpr int N_OP = int(Op::Count);
  double wait[N_OP] = {}, prep[N_OP] = {}, comp[N_OP] = {}, page[N_OP] = {}, sig[N_OP] = {};
  double prep1[N_OP] = {}, prep2[N_OP] = {};  // the prep up to T_PREP1, then to T_PREP2 (params.cuh)
  double att_kv[N_OP] = {};  // of the attention: thread 0 waiting for its staged K/V copies
  double lstall[N_OP] = {};  // the loader's ring-full wait before the op's pages
  int count[N_OP] = {};
  unsigned long long t_min = ~0ull, t_max = 0;
  for (size_t i = 0; i < n_instr; ++i) {
    const unsigned long long* r = t.data() + i * device::TIMING_FIELDS;
    const int op = int(instrs[i].op);
    count[op]++;
    wait[op] += double(r[device::T_WAIT_END] - r[device::T_WAIT_START]);
    prep[op] += double(matvec_start(r) - r[device::T_WAIT_END]);
    comp[op] += matvec_ns(r);
    page[op] += double(r[device::T_PAGE_WAIT]);
    sig[op] += double(r[device::T_SIGNAL_END] - r[device::T_COMPUTE_END]);
    lstall[op] += double(r[device::T_LOADER_STALL]);
    if (r[device::T_PREP1] && r[device::T_PREP2]) {
      prep1[op] += double(r[device::T_PREP1] - r[device::T_WAIT_END]);
      prep2[op] += double(r[device::T_PREP2] - r[device::T_PREP1]);
      if (r[device::T_ATT_KV]) att_kv[op] += double(r[device::T_ATT_KV] - r[device::T_PREP1]);
    }
    t_min = std::min(t_min, r[device::T_WAIT_START]);
    t_max = std::max(t_max, r[device::T_SIGNAL_END]);
  }
  double stall = 0;
  for (int b = 0; b < n_sm_; ++b) stall += double(t[n_instr * device::TIMING_FIELDS + size_t(b) * device::BLOCK_FIELDS]);
  std::string out;
  char line[256];
  const double per = 1e-3 / double(n_sm_);  // ns summed over SMs -> us per SM
  double tw = 0, tq = 0, tc = 0, tp = 0, ts = 0;
  std::snprintf(line, sizeof line,
                "timing (last step of a %d-step launch, ring %d pages (gate %d, MlpGateUp %d), publish %s, mid_resid %d, attn_short %d (stage %d positions)): step span %.1f us\n",
                timing_steps_, n_pages_, n_pages_ > 0 ? gate_pages_ : 0, n_pages_ > 0 ? gate_up_gate() : 0, flags_ ? "flags (wait = step barrier; polls in prep)" : "counters",
                int(mid_resid_), int(attn_short_ && attn_short_max_ > 0), attn_stage_, double(t_max - t_min) * 1e-3);
  out += line;
  out += "    op            instr  per SM per step (us): wait     prep   matvec (page wait)  publish\n";
  for (int op = 0; op < N_OP; ++op) {
    if (!count[op]) continue;
    std::snprintf(line, sizeof line, "    %-13s %6d %28.1f %8.1f %8.1f %8.1f %12.1f\n", op_name(Op(op)), count[op],
                  wait[op] * per, prep[op] * per, comp[op] * per, page[op] * per, sig[op] * per);
    out += line;
    tw += wait[op], tq += prep[op], tc += comp[op], tp += page[op], ts += sig[op];
  }
  for (int op = 0; op < N_OP; ++op)
    if (prep1[op] > 0) {
      if (Op(op) == Op::QkvProj || Op(op) == Op::MlpGateUp)
        std::snprintf(line, sizeof line, "    %-13s prep = inputs polled + summed %.1f, residual store + RMSNorm %.1f, to the first page %.1f\n",
                      op_name(Op(op)), prep1[op] * per, prep2[op] * per, (prep[op] - prep1[op] - prep2[op]) * per);
      else
        std::snprintf(line, sizeof line, "    %-13s prep = q/k/v load + RoPE + append %.1f, attention %.1f (of it K/V wait or attn_mma's tile loop %.1f), merge/normalise %.1f\n",
                      op_name(Op(op)), prep1[op] * per, prep2[op] * per, att_kv[op] * per,
                      (prep[op] - prep1[op] - prep2[op]) * per);
      out += line;
    }
  std::snprintf(line, sizeof line, "    %-13s %6zu %28.1f %8.1f %8.1f %8.1f %12.1f\n", "total", n_instr, tw * per, tq * per,
                tc * per, tp * per, ts * per);
  out += line;
  std::snprintf(line, sizeof line, "    loader stalled on a full ring: %.1f us per SM per step; in the last step, before the pages of:",
                stall * per / std::max(1, timing_steps_));
  out += line;
  for (int op = 0; op < N_OP; ++op)
    if (count[op] && lstall[op] > 0) {
      std::snprintf(line, sizeof line, " %s %.1f", op_name(Op(op)), lstall[op] * per);
      out += line;
    }
  out += "\n";
  // Version 10: how unevenly each stage ends. Per (op, layer): the mean and the latest of its instructions' ends
  // (thread 0 done with the op) and the longest matvec; summed over the layers (us per step). "late" = latest - mean
  // end: roughly what an average consumer of the stage waits for its slowest producer.
  {
    struct Agg { double sum_end = 0, max_end = 0, sum_mv = 0, max_mv = 0, max_pub = 0; int n = 0; };
    std::vector<Agg> agg(size_t(N_OP) * size_t(config_.n_layer + 1));
    for (size_t i = 0; i < n_instr; ++i) {
      const unsigned long long* r = t.data() + i * device::TIMING_FIELDS;
      const int op = int(instrs[i].op), l = std::min<int>(instrs[i].layer, config_.n_layer);
      Agg& a = agg[size_t(op) * size_t(config_.n_layer + 1) + size_t(l)];
      const double end = double(r[device::T_COMPUTE_END] - t_min);
      const double mv = matvec_ns(r);
      a.sum_end += end, a.max_end = std::max(a.max_end, end), a.sum_mv += mv, a.max_mv = std::max(a.max_mv, mv), a.n++;
      a.max_pub = std::max(a.max_pub, double(r[device::T_SIGNAL_END] - t_min));
    }
    out += "    op            late end (latest - mean, us/step)   matvec mean / longest (us/step)\n";
    for (int op = 0; op < N_OP; ++op) {
      double late = 0, mv_mean = 0, mv_max = 0;
      bool any = false;
      for (int l = 0; l <= config_.n_layer; ++l) {
        const Agg& a = agg[size_t(op) * size_t(config_.n_layer + 1) + size_t(l)];
        if (!a.n) continue;
        any = true;
        late += a.max_end - a.sum_end / a.n, mv_mean += a.sum_mv / a.n, mv_max += a.max_mv;
      }
      if (!any) continue;
      std::snprintf(line, sizeof line, "    %-13s %12.1f %28.1f / %.1f\n", op_name(Op(op)), late * 1e-3, mv_mean * 1e-3,
                    mv_max * 1e-3);
      out += line;
    }
    // Session 19: which SMs end MlpGateUp late, and whether they stream slower. Per block over the layers: the sum
    // of its end minus the stage's mean end, and of its matvec time; the 6 latest and the 6 earliest blocks, with
    // their SM (%smid) and rows -- consistent SMs across launches would say per-SM speed, not the schedule.
    std::vector<double> late_b(size_t(n_sm_), 0), mv_b(size_t(n_sm_), 0);
    std::vector<int> rows_b(size_t(n_sm_), 0);
    for (int b = 0; b < n_sm_; ++b)
      for (uint32_t i = offsets[size_t(b)]; i < offsets[size_t(b) + 1]; ++i) {
        if (instrs[i].op != Op::MlpGateUp) continue;
        const unsigned long long* r = t.data() + size_t(i) * device::TIMING_FIELDS;
        const Agg& a = agg[size_t(Op::MlpGateUp) * size_t(config_.n_layer + 1) + instrs[i].layer];
        late_b[size_t(b)] += double(r[device::T_COMPUTE_END] - t_min) - a.sum_end / a.n;
        mv_b[size_t(b)] += matvec_ns(r);
        rows_b[size_t(b)] = int(instrs[i].row_end - instrs[i].row_begin);
      }
    std::vector<int> order(static_cast<size_t>(n_sm_));
    for (int b = 0; b < n_sm_; ++b) order[size_t(b)] = b;
    std::sort(order.begin(), order.end(), [&](int x, int y) { return late_b[size_t(x)] > late_b[size_t(y)]; });
    out += "    MlpGateUp per block (late end sum / matvec sum us per step, rows, SM): latest";
    for (size_t k = 0; k < order.size(); ++k) {
      if (k == 6) out += "\n      ... earliest";
      if (k >= 6 && k + 6 < order.size()) continue;
      const int b = order[k];
      std::snprintf(line, sizeof line, " [b%d sm%llu %d rows %.1f/%.1f]", b,
                    t[n_instr * device::TIMING_FIELDS + size_t(b) * device::BLOCK_FIELDS + device::B_SMID], rows_b[size_t(b)],
                    late_b[size_t(b)] * 1e-3, mv_b[size_t(b)] * 1e-3);
      out += line;
    }
    out += "\n";
    // Session 22: what a stage's prep costs after its inputs exist. Per consumer instruction: from the latest
    // T_SIGNAL_END of the stage it reads (its stores issued, the end-of-op barrier passed) to the moment its own
    // inputs were in shared memory (T_PREP1, or its matvec start where the op has no T_PREP1); the mean over the
    // stage's instructions, summed over the layers. The prep is then the wait for that latest producer (the late end
    // above, on average) plus this propagation (the round trips of the polls, the sums) plus its own work.
    {
      const bool split = schedule_.layout.n_chunks > 1;
      auto producer = [&](Op op) {
        switch (op) {
          case Op::QkvProj: return Op::MlpDown;  // of the layer before
          case Op::AttnPartial: return Op::QkvProj;
          case Op::AttnOProj: return split ? Op::AttnPartial : Op::QkvProj;
          case Op::MlpGateUp: return Op::AttnOProj;
          case Op::MlpDown: return Op::MlpGateUp;
          case Op::LmHead: return Op::MlpDown;  // of the last layer
          default: return Op::Count;
        }
      };
      const int NL = config_.n_layer + 1;
      std::vector<double> prop_sum(size_t(N_OP) * size_t(NL), 0);
      std::vector<int> prop_n(size_t(N_OP) * size_t(NL), 0);
      for (size_t i = 0; i < n_instr; ++i) {
        const Op op = instrs[i].op, pr = producer(op);
        if (pr == Op::Count || (op == Op::QkvProj && instrs[i].layer == 0))
          continue;
        const int l = std::min<int>(instrs[i].layer, NL - 1);
        const int pl = op == Op::QkvProj ? l - 1 : op == Op::LmHead ? config_.n_layer - 1 : l;
        const Agg& pa = agg[size_t(pr) * size_t(NL) + size_t(pl)];
        const unsigned long long* r = t.data() + i * device::TIMING_FIELDS;
        const unsigned long long ready = r[device::T_PREP1] ? r[device::T_PREP1] : matvec_start(r);
        if (!pa.n || !ready) continue;
        prop_sum[size_t(op) * size_t(NL) + size_t(l)] += double(ready - t_min) - pa.max_pub;
        prop_n[size_t(op) * size_t(NL) + size_t(l)]++;
      }
      out += "    inputs in shared memory after the latest producer's publish (mean, us per step):";
      for (int op = 0; op < N_OP; ++op) {
        double sum = 0;
        bool any = false;
        for (int l = 0; l < NL; ++l)
          if (const int n = prop_n[size_t(op) * size_t(NL) + size_t(l)]) sum += prop_sum[size_t(op) * size_t(NL) + size_t(l)] / n, any = true;
        if (!any) continue;
        std::snprintf(line, sizeof line, " %s %.1f", op_name(Op(op)), sum * 1e-3);
        out += line;
      }
      out += "\n";
    }
    for (size_t i = 0; i < n_instr; ++i)
      if (instrs[i].op == Op::Argmax) {
        const unsigned long long* r = t.data() + i * device::TIMING_FIELDS;
        std::snprintf(line, sizeof line, "    Argmax: wait %.1f us, op %.1f us, publish %.1f us\n",
                      double(r[device::T_WAIT_END] - r[device::T_WAIT_START]) * 1e-3,
                      double(r[device::T_COMPUTE_END] - r[device::T_WAIT_END]) * 1e-3,
                      double(r[device::T_SIGNAL_END] - r[device::T_COMPUTE_END]) * 1e-3);
        out += line;
      }
  }
  return out;
}

}  // namespace mk::megakernel
