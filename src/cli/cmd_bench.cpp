// `megakernel bench`: speed of the GPU backends (layered CUDA graph; with --backend megakernel|all also the
// persistent megakernel) on a model folder or on random weights of named shapes, against ceilings measured in the
// same run (read bandwidth, bf16 matmul rate, the decode matvec on two shapes).
// Prints a table for people, or JSON with --json (bench/compare_torch.py reads it).
//   megakernel bench --shape llama-3.2-1b --shape llama-3.1-8b [--json]
//   megakernel bench --shape llama-3.2-1b --backend all --context 32 --context 4096 --context 16384
//   megakernel bench --model /models/Llama-3.2-1B
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  // The decode matvec: split-K (-early: triggering the next launch at its start, as the decode step's QKV, O and
  // down projections do); then a read-only kernel over the same bytes, the reference.
  for (const char* k : {"splitk", "splitk-early", "read"})
    for (auto [r, c] : {std::pair{8192, 2048}, std::pair{2048, 8192}, std::pair{16384, 2048}, std::pair{3072, 2048},
                        std::pair{2048, 2048}}) {
      auto mv = cuda::measure_matvec(r, c, 20, k);
      if (!mv) return mv.error();
      j["matvec"].push_back({{"kernel", k}, {"rows", r}, {"cols", c}, {"us_single", mv->us_single},
                             {"us_chained", mv->us_chained}, {"tbps_single", mv->tbps_single},
                             {"tbps_chained", mv->tbps_chained}});
      std::fprintf(human(o), "matvec %-11s %5dx%-5d one launch %6.2f us (%.2f TB/s, %3.0f%%); in a PDL graph %6.2f us (%.2f TB/s, %3.0f%%)\n",
                   k, r, c, mv->us_single, mv->tbps_single, 100 * mv->tbps_single / read_tbps, mv->us_chained,
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

// A decode variant: '+'-joined features on top of the defaults, e.g. "rope-kernel+late-add".
//   rope-kernel    the separate RoPE kernel (HF row order) instead of the default fused epilogue (rope-fused)
//   graph          no PDL;  eager+pdl  no CUDA graph
//   steps<K>       K decode steps per graph launch (per-token figures = per-launch time / K)
//   late-add       the O and down projections read their residual rows after the PDL wait (default: before)
//   late-kv        decode attention streams K/V only after its PDL wait (default: before, attn_early_kv)
//   rope-attn, rope-matvec   RoPE (and the q/k norm) in the decode attention / in the QKV matvec's epilogue
//                  (CudaBackendOptions::rope_in_attention; default: attention for models with a q/k norm)
//   h-f32          the SwiGLU output h in f32 to the down projection (default: bf16)
//   early-trigger, late-trigger   CudaBackendOptions::early_trigger on / off
//   temp           decode steps draw at temperature 1 on the device (seed 1) instead of the argmax
//   sample<N>      CudaBackendOptions::sample_blocks = N (the draw over N blocks; with temp)
//   topk<K>, topp<P>   decode steps draw at temperature 1 (seed 1) with top_k = K / top_p = P on the device (e.g.
//                  topk40, topp0.9, topk40+topp0.95)
//   stopsteps<S>   CudaBackendOptions::stop_graph_steps = S, and the stop-id rows (the default variant always has them)
//   stop-prefetch, stop-noprefetch   CudaBackendOptions::stop_prefetch on / off (and the stop-id rows)
//   skip-<k>       measurement only: kernel k (qkv, attn, o, gu, down) left out of the step (garbage results;
//                  the time saved is that kernel's marginal cost in the chain)
struct Variant {
  cuda::CudaBackendOptions opt;
  SamplingParams sampling;  // temperature 0: greedy decode
  bool fuse_rope = true;  // as make_cuda_backend
  bool stop_rows = false;  // time calls with and without stop ids (time_stop_calls)
};

unsigned leave_out_bit(const std::string& k) {
  if (k == "qkv") return cuda::LEAVE_QKV;
  if (k == "attn") return cuda::LEAVE_ATTN;
  if (k == "o") return cuda::LEAVE_O;
  if (k == "gu") return cuda::LEAVE_GATE_UP;
  if (k == "down") return cuda::LEAVE_DOWN;
  return 0;
}

// A number in (0, 1] written in full (e.g. "0.9"), else -1.
float parse_unit(const std::string& s) {
  char* end = nullptr;
  const float v = s.empty() ? -1.f : std::strtof(s.c_str(), &end);
  return end && *end == '\0' && v > 0.f && v <= 1.f ? v : -1.f;
}

Expected<Variant> parse_variant(const std::string& name) {
  Variant v;
  if (name == "graph+pdl") return v;
  if (name == "eager+pdl") {
    v.opt.graph = false;
    return v;
  }
  size_t at = 0;
  while (at <= name.size()) {
    const size_t end = std::min(name.find('+', at), name.size());
    const std::string f = name.substr(at, end - at);
    at = end + 1;
    auto num = [&](const char* prefix) -> long {
      const size_t n = std::strlen(prefix);
      if (f.compare(0, n, prefix) != 0 || f.size() == n || f.find_first_not_of("0123456789", n) != std::string::npos)
        return -1;
      return std::stol(f.substr(n));
    };
    if (f == "rope-fused") v.fuse_rope = true;
    else if (f == "rope-kernel") v.fuse_rope = false;
    else if (f == "graph") v.opt.pdl = false;
    else if (num("steps") >= 1) v.opt.graph_steps = int(num("steps"));
    else if (num("stopsteps") >= 1) v.opt.stop_graph_steps = int(num("stopsteps")), v.stop_rows = true;
    else if (f == "stop-prefetch") v.opt.stop_prefetch = true, v.stop_rows = true;
    else if (f == "stop-noprefetch") v.opt.stop_prefetch = false, v.stop_rows = true;
    else if (f == "early-add") v.opt.add_early = true;  // the default since round 6
    else if (f == "late-add") v.opt.add_early = false;
    else if (f == "late-kv") v.opt.attn_early_kv = false;
    else if (f == "rope-attn") v.opt.rope_in_attention = 1;
    else if (f == "rope-matvec") v.opt.rope_in_attention = 0;
    else if (f == "h-f32") v.opt.h_bf16 = false;
    else if (f == "early-trigger") v.opt.early_trigger = true;
    else if (f == "late-trigger") v.opt.early_trigger = false;
    else if (f == "temp") v.sampling.temperature = 1.f, v.sampling.seed = 1;
    else if (num("sample") >= 1) v.opt.sample_blocks = int(num("sample"));
    else if (num("topk") >= 1) v.sampling.temperature = 1.f, v.sampling.seed = 1, v.sampling.top_k = int(num("topk"));
    else if (float p = f.starts_with("topp") ? parse_unit(f.substr(4)) : -1.f; p > 0.f)
      v.sampling.temperature = 1.f, v.sampling.seed = 1, v.sampling.top_p = p;
    else if (f.starts_with("skip-") && leave_out_bit(f.substr(5))) v.opt.leave_out |= leave_out_bit(f.substr(5));
    else
      return make_error("--variants: '", f, "' in '", name,
                        "' is not a variant feature (expected rope-kernel, rope-fused, graph, eager+pdl, steps<K>, stopsteps<S>, "
                        "stop-prefetch, stop-noprefetch, late-add, late-kv, rope-attn, rope-matvec, h-f32, early-trigger, late-trigger, temp, sample<N>, topk<K>, topp<P>, skip-{qkv,attn,o,gu,down}, joined by '+')");
  }
  return v;
}

// One decode row: both figures, each named for what it is (the per-token median includes an event record between
// graph replays; the back-to-back mean is what a generation loop sees).
void print_decode(const BenchOptions& o, json& j, const std::string& variant, const cuda::DecodeTiming& d,
                  double read_tbps) {
  const double gbps = d.bytes_per_token / (d.ms_median * 1e-3) / 1e9, pct = 100.0 * gbps / (read_tbps * 1e3);
  const double gbps_b2b = d.bytes_per_token / (d.ms_mean * 1e-3) / 1e9, pct_b2b = 100.0 * gbps_b2b / (read_tbps * 1e3);
  j["decode"].push_back({{"variant", variant}, {"context", d.context}, {"random_context", d.random_context},
                         {"ms_per_token", d.ms_median}, {"ms_per_token_mean", d.ms_mean},
                         {"ms_per_token_back_to_back", d.ms_mean}, {"tokens_per_s", 1e3 / d.ms_median},
                         {"bytes_per_token", d.bytes_per_token}, {"gbps", gbps}, {"pct_of_read_ceiling", pct},
                         {"pct_of_read_ceiling_back_to_back", pct_b2b}});
  std::fprintf(human(o),
               "  decode ctx %5d%s %-22s median %7.4f ms/token (%5.1f%%), back-to-back mean %7.4f ms/token (%5.1f%%)"
               "  %7.1f tok/s\n",
               d.context, d.random_context ? "*" : " ", variant.c_str(), d.ms_median, pct, d.ms_mean, pct_b2b,
               1e3 / d.ms_mean);
}

// The stop-id rows of a variant: whole calls without and with stop ids (per token), and the cost of a call that
// stops at its first token against a one-token call (per call).
void print_stop(const BenchOptions& o, json& j, const std::string& variant, const cuda::StopTiming& t, bool body_pdl) {
  const double pct = 100.0 * (t.ms_stops / t.ms_plain - 1.0);
  j["decode_stop"].push_back({{"variant", variant}, {"context", t.context}, {"n_tokens", t.n_tokens},
                              {"ms_per_token_calls", t.ms_plain}, {"ms_per_token_calls_stop_ids", t.ms_stops},
                              {"stop_ids_cost_pct", pct}, {"ms_call_stop_at_first", t.ms_stop_first},
                              {"ms_call_one_token", t.ms_one}, {"while_body_pdl", body_pdl}});
  std::fprintf(human(o),
               "  decode ctx %5d  %-22s calls of %d: %7.4f ms/token, +stop ids %7.4f ms/token (%+.2f%%); stop at token 1:"
               " %6.3f ms/call (1-token call %6.3f ms)%s\n",
               t.context, variant.c_str(), t.n_tokens, t.ms_plain, t.ms_stops, pct, t.ms_stop_first, t.ms_one,
               body_pdl ? "" : " [WHILE bodies without PDL]");
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
  std::fprintf(human(o), "  decode: median of per-token times (CUDA event pair around each graph replay, %d tokens x %d"
               " repeats, after 16 warm-up steps) and back-to-back mean (one event pair around %d replays, median of"
               " the repeats); %% of the read ceiling, weights + K/V bytes\n", o.n_tokens, o.repeats, o.n_tokens);
  // Default first: split-K matvec, RoPE fused into the QKV matvec, cuda/attention's decode (make_cuda_backend).
  std::vector<std::string> names = {"graph+pdl"};
  const std::vector<std::string> ablation = {"rope-kernel", "graph", "eager+pdl", "late-add", "late-kv", "steps8"};
  for (const std::string& n : o.ablation ? ablation : o.variants)
    if (n != "graph+pdl") names.push_back(n);
  if (o.backend == "megakernel") names.clear();
  for (const std::string& name : names) {
    auto v = parse_variant(name);
    if (!v) return v.error();
    auto b = build(what, c, m, max_ctx, v->opt, v->fuse_rope);
    if (!b) return b.error();
    const bool main_variant = &name == &names.front();
    auto t = cuda::time_backend(**b, main_variant ? o.prefill : std::vector<int>{},
                                main_variant ? o.contexts : std::vector<int>{o.contexts.front()}, o.n_tokens,
                                o.repeats, wbytes, 1024, v->sampling);
    if (!t) return make_error(what, ": ", t.message());
    for (auto& p : t->prefill) {
      j["prefill"].push_back({{"tokens", p.n_tokens}, {"ms", p.ms}, {"eager_ms", p.eager_ms},
                              {"tokens_per_s", p.n_tokens / (p.ms * 1e-3)}});
      std::fprintf(human(o),
                   "  prefill %5d tokens      %9.3f ms   %9.0f tokens/s   (first use of the length: %.3f ms)\n",
                   p.n_tokens, p.ms, p.n_tokens / (p.ms * 1e-3), p.eager_ms);
    }
    for (auto& d : t->decode) print_decode(o, j, name, d, read_tbps);
    if (main_variant || v->stop_rows) {  // the device stop check (decode_*_until): greedy, and the variant's draw
      std::vector<std::pair<std::string, SamplingParams>> modes = {{name, v->sampling}};
      if (main_variant) {
        SamplingParams temp;
        temp.temperature = 1.f, temp.seed = 1;
        modes.push_back({name + " temp", temp});
      }
      for (const auto& [label, sp] : modes)
        for (int ctx : main_variant && sp.greedy() ? o.contexts : std::vector<int>{o.contexts.front()}) {
          auto st = cuda::time_stop_calls(**b, ctx, o.n_tokens, o.repeats, sp);
          if (!st) return make_error(what, ": ", st.message());
          print_stop(o, j, label, *st, (*b)->stop_body_pdl());
        }
    }
  }
  if (o.backend != "layered") {
    MegakernelBenchArgs a{o.contexts, o.n_tokens, o.repeats, wbytes, read_tbps, human(o), m};
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
  json out = {{"gpu", dev->name}, {"sm_count", dev->sm_count}, {"matvec_kernel", cuda::matvec_kernel_name()},
              {"decode_timing", "ms_per_token: median of per-token times, a CUDA event recorded between graph replays; "
                                "ms_per_token_back_to_back (= ms_per_token_mean): one event pair around n_tokens "
                                "back-to-back replays / n_tokens, median over repeats"}};
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
                "Also time decode in every ablation variant (RoPE kernel, no PDL, no graph, late residual and K/V reads, 8 steps per graph launch)");
  sub->add_option("--variants", opts->variants,
                  "Ablation variants to time at the first context: '+'-joined features (rope-kernel, rope-fused, graph, "
                  "eager+pdl, steps<K>, stopsteps<S>, stop-prefetch, stop-noprefetch, late-add, late-kv, rope-attn, rope-matvec, h-f32, early-trigger, late-trigger, temp, sample<N>, topk<K>, topp<P>, skip-<kernel>)")
      ->delimiter(',');
  return {sub, [opts] { return run_bench(*opts); }};
}

}  // namespace mk::cli
