// `megakernel bench`: speed of the GPU backends (layered CUDA graph; with --backend megakernel|all also the
// persistent megakernel) on a model folder or on random weights of named shapes, against ceilings measured in the
// same run (read bandwidth, bf16 matmul rate, the decode matvec on two shapes).
// Prints a table for people, or JSON with --json (bench/compare_torch.py reads it).
//   megakernel bench --shape llama-3.2-1b --shape llama-3.1-8b [--json]
//   megakernel bench --shape llama-3.2-1b --backend all --context 32 --context 4096 --context 16384
//   megakernel bench --model /models/Llama-3.2-1B
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "megakernel/model.h"
#ifdef MK_HAVE_CUDA
#include "cli/bench_megakernel.h"
#include "cuda/backend/backend_bench.h"
#include "cuda/backend/bench_probe.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/device_info.h"
#include "cuda/ops/matvec.h"
#endif

namespace mk::cli {
namespace {

using json = nlohmann::json;

struct BenchOptions {
  std::string model_dir;
  std::vector<std::string> shapes;
  std::string device = "cuda";
  std::string backend = "layered";  // layered, megakernel or all
  bool json_out = false;
  bool no_ceilings = false;
  bool ablation = false;
  std::vector<std::string> variants;  // ablation variants by name (--ablation: all)
  int n_tokens = 128;
  int repeats = 5;
  std::vector<int> prefill = {32, 1024};
  std::vector<int> contexts = {32, 4096};
};

#ifdef MK_HAVE_CUDA
// Everything printed for people goes to stderr when --json owns stdout.
FILE* human(const BenchOptions& o) { return o.json_out ? stderr : stdout; }

Expected<json> bench_ceilings(const BenchOptions& o, double& read_tbps) {
  json j;
  auto rd = cuda::measure_read_ceiling(4.0, 20);
  if (!rd) return rd.error();
  read_tbps = rd->tbps;
  j["read_tbps"] = rd->tbps;
  j["read_shape"] = rd->best_shape;
  std::fprintf(human(o), "read ceiling      %.3f TB/s (%.1f GiB, %s)\n", rd->tbps, rd->bytes / (1 << 30),
               rd->best_shape.c_str());
  auto mm = cuda::measure_matmul_rate(8192, 30);
  if (!mm) return mm.error();
  j["matmul_tflops"] = mm->tflops;
  std::fprintf(human(o), "bf16 matmul       %.1f TFLOP/s (8192^3, cuBLASLt, %.3f ms)\n", mm->tflops, mm->ms);
  for (auto [r, c, kname] : {std::tuple{8192, 2048, "splitk"}, std::tuple{2048, 8192, "splitk"},
                             std::tuple{16384, 2048, "splitk"}, std::tuple{3072, 2048, "splitk"},
                             std::tuple{2048, 2048, "splitk"}, std::tuple{8192, 2048, "bulk"},
                             std::tuple{2048, 8192, "bulk"}, std::tuple{16384, 2048, "bulk"},
                             std::tuple{3072, 2048, "bulk"}, std::tuple{2048, 2048, "bulk"},
                             std::tuple{16384, 2048, "bulk-static"}, std::tuple{2048, 8192, "bulk-static"}}) {
    auto mv = cuda::measure_matvec(r, c, 20, kname);
    if (!mv) return mv.error();
    j["matvec"].push_back({{"kernel", kname}, {"rows", r}, {"cols", c}, {"us_single", mv->us_single},
                           {"us_chained", mv->us_chained}, {"tbps_single", mv->tbps_single},
                           {"tbps_chained", mv->tbps_chained}});
    std::fprintf(human(o), "matvec %-7s %5dx%-5d one launch %6.2f us (%.2f TB/s, %3.0f%%); in a PDL graph %6.2f us (%.2f TB/s, %3.0f%%)\n",
                 kname, r, c, mv->us_single, mv->tbps_single, 100 * mv->tbps_single / read_tbps, mv->us_chained,
                 mv->tbps_chained, 100 * mv->tbps_chained / read_tbps);
  }
  return j;
}

Expected<std::unique_ptr<cuda::CudaBackend>> build(const std::string& what, const ModelConfig& c, const Model* m,
                                                   int max_ctx, const cuda::CudaBackendOptions& opt, bool fuse_rope) {
  auto w = m ? cuda::upload_weights(c, m->weights, fuse_rope) : cuda::random_device_weights(c, 1234, fuse_rope);
  if (!w) return make_error(what, ": ", w.message());
  return cuda::CudaBackend::create(c, std::move(*w), max_ctx, opt);
}

Expected<json> bench_one(const BenchOptions& o, const std::string& what, const ModelConfig& c, const Model* m,
                         double read_tbps) {
  int max_ctx = 0;
  for (int x : o.contexts) max_ctx = std::max(max_ctx, x + o.n_tokens + 32);
  for (int x : o.prefill) max_ctx = std::max(max_ctx, x);
  double wbytes = double(decode_bytes_per_token(c, DType::BF16));
  json j = {{"model", what}, {"weights", m ? "checkpoint" : "random"}, {"decode_weight_bytes", wbytes},
            {"n_tokens", o.n_tokens}, {"repeats", o.repeats}};
  std::fprintf(human(o), "\n%s (%s weights, bf16): %.3f GB of weights read per token; floor %.3f ms at %.2f TB/s\n",
               what.c_str(), m ? "checkpoint" : "random", wbytes / 1e9, wbytes / (read_tbps * 1e12) * 1e3, read_tbps);
  struct Variant {
    const char* name;
    bool graph, pdl, fuse_rope;
    const char* matvec;  // matvec kernel (ops/matvec.h), "bulk-static": bulk with static unit assignment
    bool prefetch_o;
  };
  // Default: split-K matvec, the RoPE kernel, cuda/attention's decode (the fastest measured combination).
  std::vector<Variant> variants = {{"graph+pdl", true, true, false, "splitk", false}};
  const std::vector<Variant> extra = {
      {"rope-fused", true, true, true, "splitk", false},    // RoPE + K/V write in the QKV matvec epilogue
      {"bulk-auto", true, true, false, "bulk-auto", true},  // bulk matvec where one launch holds W
      {"bulk-all", true, true, false, "bulk", true},
      {"bulk-all-static", true, true, false, "bulk-static", true},
      {"graph", true, false, false, "splitk", false},
      {"eager+pdl", false, true, false, "splitk", false}};
  for (const Variant& v : extra)
    if (o.ablation || std::find(o.variants.begin(), o.variants.end(), v.name) != o.variants.end())
      variants.push_back(v);
  if (o.backend == "megakernel") variants.clear();
  for (const Variant& v : variants) {
    cuda::CudaBackendOptions opt;
    opt.graph = v.graph;
    opt.pdl = v.pdl;
    opt.prefetch_o = v.prefetch_o;
    const bool bulk_static = std::string(v.matvec) == "bulk-static";
    cuda::set_matvec_kernel(bulk_static ? "bulk" : v.matvec);  // read when the graph is captured (first step)
    cuda::set_matvec_bulk_static(bulk_static);
    auto b = build(what, c, m, max_ctx, opt, v.fuse_rope);
    if (!b) return b.error();
    bool main_variant = &v == &variants.front();
    auto t = cuda::time_backend(**b, main_variant ? o.prefill : std::vector<int>{},
                                main_variant ? o.contexts : std::vector<int>{o.contexts.front()}, o.n_tokens,
                                o.repeats, wbytes);
    if (!t) return make_error(what, ": ", t.message());
    for (auto& p : t->prefill) {
      j["prefill"].push_back({{"tokens", p.n_tokens}, {"ms", p.ms}, {"tokens_per_s", p.n_tokens / (p.ms * 1e-3)}});
      std::fprintf(human(o), "  prefill %5d tokens      %9.3f ms   %9.0f tokens/s\n", p.n_tokens, p.ms,
                   p.n_tokens / (p.ms * 1e-3));
    }
    for (auto& d : t->decode) {
      double gbps = d.bytes_per_token / (d.ms_median * 1e-3) / 1e9;
      double pct = 100.0 * gbps / (read_tbps * 1e3);
      j["decode"].push_back({{"variant", v.name}, {"context", d.context}, {"random_context", d.random_context},
                             {"ms_per_token", d.ms_median}, {"ms_per_token_mean", d.ms_mean},
                             {"tokens_per_s", 1e3 / d.ms_median}, {"bytes_per_token", d.bytes_per_token},
                             {"gbps", gbps}, {"pct_of_read_ceiling", pct}});
      std::fprintf(human(o), "  decode ctx %5d%s %-27s %7.4f ms/token (mean %7.4f)  %7.1f tok/s  %7.1f GB/s  %5.1f%% of ceiling\n",
                   d.context, d.random_context ? "*" : " ", v.name, d.ms_median, d.ms_mean, 1e3 / d.ms_median, gbps,
                   pct);
    }
  }
  cuda::set_matvec_kernel("splitk");
  cuda::set_matvec_bulk_static(false);
  if (o.backend != "layered") {
    MegakernelBenchArgs a{o.contexts, o.n_tokens, o.repeats, wbytes, read_tbps, human(o)};
    if (m) std::fprintf(human(o), "  (the megakernel is timed on random weights of the same shapes)\n");
    MK_TRY(bench_megakernel(c, a, j["decode"]));
  }
  return j;
}

int run_bench(const BenchOptions& o) {
  if (o.device != "cuda") {
    std::fprintf(stderr, "megakernel bench: --device %s is not benchmarked (the harness times the GPU backends; use --device cuda)\n",
                 o.device.c_str());
    return 2;
  }
  if (o.backend != "layered" && o.backend != "megakernel" && o.backend != "all") {
    std::fprintf(stderr, "megakernel bench: --backend %s is not known (expected layered, megakernel or all)\n",
                 o.backend.c_str());
    return 2;
  }
  if (o.model_dir.empty() && o.shapes.empty()) {
    std::fprintf(stderr, "megakernel bench: give --model DIR or --shape NAME (known shapes:");
    for (auto& n : shape_names()) std::fprintf(stderr, " %s", n.c_str());
    std::fprintf(stderr, ")\n");
    return 2;
  }
  auto dev = cuda::query_device();
  if (!dev) {
    std::fprintf(stderr, "megakernel bench: %s\n", dev.message().c_str());
    return 1;
  }
  json out = {{"gpu", dev->name}, {"sm_count", dev->sm_count}, {"matvec_kernel", cuda::matvec_kernel_name()}};
  std::fprintf(human(o), "GPU %s, %d SMs, %.1f GiB\n", dev->name.c_str(), dev->sm_count,
               double(dev->total_memory) / (1 << 30));
  double read_tbps = 4.5;
  if (!o.no_ceilings) {
    auto c = bench_ceilings(o, read_tbps);
    if (!c) {
      std::fprintf(stderr, "megakernel bench: %s\n", c.message().c_str());
      return 1;
    }
    out["ceilings"] = *c;
  }
  out["read_tbps_used"] = read_tbps;
  std::vector<std::pair<std::string, Expected<Model>>> models;
  if (!o.model_dir.empty()) models.emplace_back(o.model_dir, load_model(o.model_dir));
  for (auto& s : o.shapes) {
    auto c = shape_config(s);
    if (!c) {
      std::fprintf(stderr, "megakernel bench: %s\n", c.message().c_str());
      return 2;
    }
    models.emplace_back(s, Model{*c, Weights{}});
  }
  for (auto& [name, m] : models) {
    if (!m) {
      std::fprintf(stderr, "megakernel bench: %s\n", m.message().c_str());
      return 1;
    }
    bool random = m->weights.layers.empty();
    auto r = bench_one(o, name, m->config, random ? nullptr : &*m, read_tbps);
    if (!r) {
      std::fprintf(stderr, "megakernel bench: %s\n", r.message().c_str());
      return 1;
    }
    out["models"].push_back(*r);
  }
  if (o.json_out) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
#else
int run_bench(const BenchOptions&) {
  std::fprintf(stderr, "megakernel bench: this build has no CUDA backends (configure with nvcc present, MK_CUDA=ON)\n");
  return 2;
}
#endif

}  // namespace

Command add_bench_command(CLI::App& parent) {
  auto opts = std::make_shared<BenchOptions>();
  auto* sub = parent.add_subcommand("bench", "Measure prefill and decode speed against the GPU's ceilings");
  sub->add_option("--model", opts->model_dir, "Model folder (config.json + safetensors)");
  sub->add_option("--shape", opts->shapes, "Named shape with random weights (repeatable), e.g. llama-3.2-1b");
  sub->add_option("--device", opts->device, "cuda (the harness times GPU backends)");
  sub->add_option("--backend", opts->backend, "layered (default), megakernel, or all (both in the same run)");
  sub->add_flag("--json", opts->json_out, "JSON on stdout (the table goes to stderr)");
  sub->add_option("--tokens", opts->n_tokens, "Decode tokens per repeat")->check(CLI::Range(1, 4096));
  sub->add_option("--repeats", opts->repeats, "Repeats of every measurement")->check(CLI::Range(1, 1000));
  sub->add_option("--prefill", opts->prefill, "Prompt lengths to time")->check(CLI::Range(1, 65536));
  sub->add_option("--context", opts->contexts, "Context lengths for decode")->check(CLI::Range(0, 131072));
  sub->add_flag("--no-ceilings", opts->no_ceilings, "Skip the bandwidth/matmul ceilings (uses 4.5 TB/s)");
  sub->add_flag("--ablation", opts->ablation,
                "Also time decode in every ablation variant (matvec kernels, attention, RoPE fusion, no PDL, no graph)");
  sub->add_option("--variants", opts->variants,
                  "Ablation variants to time at the first context (rope-fused, bulk-auto, bulk-all, bulk-all-static, "
                  "graph, eager+pdl)")
      ->delimiter(',');
  return {sub, [opts] { return run_bench(*opts); }};
}

}  // namespace mk::cli
