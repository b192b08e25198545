// See bench_megakernel.h.
#ifdef MK_HAVE_CUDA
#include "cli/bench_megakernel.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "cuda/backend/device_weights.h"
#include "megakernel/device/megakernel_backend.h"

namespace mk::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Status cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok_status();
  return make_error("megakernel bench: ", what, ": ", cudaGetErrorString(e));
}

// Median ms/token over repeats of decoding n tokens from position ctx, steps_per_launch steps per launch; greedy, or
// drawn on the device with `sample` (the Argmax instruction's draw, device/ops/sample.cuh).
// With stop_ids: the device's stop check on every step (ids that never match: all n tokens).
Expected<double> time_decode(megakernel::MegakernelBackend& b, int ctx, int n, int steps_per_launch, int repeats,
                             const SamplingParams* sample = nullptr, std::span<const int32_t> stop_ids = {}) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  cudaEvent_t e0, e1;
  MK_TRY(cuda_ok(cudaEventCreate(&e0), "event"));
  MK_TRY(cuda_ok(cudaEventCreate(&e1), "event"));
  std::vector<double> per;
  Status st = Status::ok_status();
  for (int r = -1; r < repeats && st.ok(); ++r) {  // one warm-up
    b.truncate(ctx);
    st = cuda_ok(cudaEventRecord(e0, b.stream()), "event");
    if (st.ok() && !stop_ids.empty()) {
      const megakernel::SampleParams sp =
          sample ? megakernel::SampleParams{sample->temperature, sample->min_p, sample->seed, 0} : megakernel::SampleParams{};
      auto k = b.generate_until(1, ctx, out, steps_per_launch, sp, stop_ids);
      if (!k) st = k.error();
      else if (*k != n) st = make_error("megakernel bench: the stop check ended a decode that has no stop id");
    } else if (st.ok()) {
      st = sample ? b.generate_sample(1, ctx, *sample, 0, out, steps_per_launch) : b.generate_greedy(1, ctx, out, steps_per_launch);
    }
    if (st.ok()) st = cuda_ok(cudaEventRecord(e1, b.stream()), "event");
    if (st.ok()) st = cuda_ok(cudaEventSynchronize(e1), "decode");
    float ms = 0;
    if (st.ok()) st = cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "event");
    if (st.ok() && r >= 0) per.push_back(ms / n);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  b.truncate(ctx);  // the next configuration decodes from the same cached context
  if (!st.ok()) return st.error();
  return median(per);
}

// MK_BENCH_TIMING set: the in-kernel timestamps (MegakernelBackend::timing_report) of a 16-step greedy and a
// 16-step sampled launch, each publish protocol: where a sampled step's extra time goes.
Status print_timing(megakernel::MegakernelBackend& b, int ctx, const SamplingParams& temp, FILE* out) {
  const bool flags = b.flag_publish();
  std::vector<int32_t> ids(16);
  for (bool f : {flags, !flags})
    for (bool sampled : {false, true}) {
      b.set_flag_publish(f);
      MK_TRY(b.set_timing(true));
      b.truncate(ctx);
      MK_TRY(sampled ? b.generate_sample(1, ctx, temp, 0, ids, 16) : b.generate_greedy(1, ctx, ids, 16));
      auto rep = b.timing_report();
      if (!rep) return rep.error();
      std::fprintf(out, "  %s, %s:\n%s", sampled ? "sampled (temp 1)" : "greedy", f ? "flags" : "counters", rep->c_str());
      MK_TRY(b.set_timing(false));
    }
  b.set_flag_publish(flags);
  b.truncate(ctx);
  return Status::ok_status();
}

}  // namespace

Status bench_megakernel(const ModelConfig& c, const MegakernelBenchArgs& a, nlohmann::json& decode) {
  for (int ctx : a.contexts) {
    auto w = a.model ? cuda::upload_weights(c, a.model->weights) : cuda::random_device_weights(c, 1234);
    if (!w) return w.error();
    auto b = megakernel::MegakernelBackend::create(c, std::move(*w), ctx + a.n_tokens + 1);
    if (!b) {  // e.g. head_dim 32: report and go on (the engine falls back to the layered path there)
      decode.push_back({{"backend", "megakernel"}, {"context", ctx}, {"refused", b.message()}});
      std::fprintf(a.out, "  megakernel refused: %s\n", b.message().c_str());
      return Status::ok_status();
    }
    const bool random = ctx > 1024;
    if (random) {
      MK_TRY((*b)->set_random_context(ctx));
    } else if (ctx > 0) {
      std::vector<int32_t> prompt(static_cast<size_t>(ctx), 7);
      std::vector<float> logits(static_cast<size_t>(c.n_vocab));
      MK_TRY((*b)->forward(prompt, 0, logits));
    }
    const double mean_ctx = ctx + a.n_tokens / 2.0;
    const double bytes = a.weight_bytes + 2.0 * c.n_layer * mean_ctx * c.kv_dim() * 2.0;
    SamplingParams temp;  // the sampled row: temperature 1 (no min-p), every step drawn on the device
    temp.temperature = 1.f, temp.seed = 1;
    // The EOS check on the device (issue 5) with 2 stop ids that never match (outside the vocabulary): its cost per step.
    const int32_t never[2] = {c.n_vocab, c.n_vocab + 1};
    struct Row {
      int spl;
      bool sampled, stops;
    };
    for (const Row& row : {Row{1, false, false}, Row{a.n_tokens, false, false}, Row{a.n_tokens, true, false},
                           Row{a.n_tokens, false, true}, Row{a.n_tokens, true, true}}) {
      const int spl = row.spl;
      auto ms = time_decode(**b, ctx, a.n_tokens, spl, a.repeats, row.sampled ? &temp : nullptr,
                            row.stops ? std::span<const int32_t>(never) : std::span<const int32_t>());
      if (!ms) return ms.error();
      const double gbps = bytes / (*ms * 1e-3) / 1e9;
      const double pct = 100.0 * gbps / (a.read_tbps * 1e3);
      const std::string name = "megakernel " + std::to_string(spl) + " step" + (spl > 1 ? "s" : "") + "/launch" +
                               (row.sampled ? " temp 1" : "") + (row.stops ? " +stop ids" : "");
      decode.push_back({{"backend", "megakernel"}, {"variant", name}, {"steps_per_launch", spl}, {"context", ctx},
                        {"random_context", random}, {"ms_per_token", *ms}, {"tokens_per_s", 1e3 / *ms},
                        {"bytes_per_token", bytes}, {"gbps", gbps}, {"pct_of_read_ceiling", pct}});
      std::fprintf(a.out, "  decode ctx %5d%s %-27s %7.4f ms/token                 %7.1f tok/s  %7.1f GB/s  %5.1f%% of ceiling\n",
                   ctx, random ? "*" : " ", name.c_str(), *ms, 1e3 / *ms, gbps, pct);
    }
    if (std::getenv("MK_BENCH_TIMING")) MK_TRY(print_timing(**b, ctx, temp, a.out));
  }
  return Status::ok_status();
}

}  // namespace mk::cli
#endif
