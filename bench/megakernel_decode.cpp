// Megakernel decode benchmark: ms/token of the megakernel (one step per launch and K steps per launch) for named
// model shapes with random bf16 weights generated on the device, against the read-bandwidth floor measured in the
// same run (mk::cuda::measure_read_ceiling: a read-only kernel over 4 GiB, the 4.5 TB/s ceiling), and the
// layered CUDA-graph path.
// Prompt of 32 tokens (one megakernel launch each), then 128 decoded tokens; long contexts use a random KV cache.
// Usage: megakernel_decode [shape ...]   (default llama-3.2-1b). Prints one line per measurement; record in RESULTS.md.
#if !defined(MK_HAVE_CUDA)
#include <cstdio>
int main() {
  std::puts("megakernel_decode: built without CUDA");
  return 0;
}
#else
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/backend/bench_probe.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/common/bench_timing.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/model.h"
#include "model/shapes.h"

using namespace mk;

namespace {

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ms/token of the megakernel decoding n_new tokens from position pos, steps_per_launch steps per launch; greedy, or
// with `sample` drawn at temperature 1 (the sampled instance: SamplePartial and the draw in Argmax).
double time_megakernel(megakernel::MegakernelBackend& b, int pos, int n_new, int steps_per_launch, int reps,
                       bool sample = false) {
  std::vector<double> per;
  std::vector<int32_t> out(static_cast<size_t>(n_new));
  SamplingParams sp;
  sp.temperature = 1.f, sp.seed = 1;
  cuda::EventPair ev;
  for (int r = 0; r < reps; ++r) {
    b.truncate(pos);
    Status st;
    const float ms = ev.time(b.stream(), [&] {
      st = sample ? b.generate_sample(1, pos, sp, 0, out, steps_per_launch) : b.generate_greedy(1, pos, out, steps_per_launch);
    });
    if (!st.ok()) {
      std::fprintf(stderr, "megakernel: %s\n", st.message().c_str());
      std::exit(1);
    }
    per.push_back(ms / n_new);
  }
  return median(per);
}

double time_layered(cuda::CudaBackend& b, int pos, int n_new, int reps) {
  std::vector<double> per;
  cuda::EventPair ev;
  for (int r = 0; r < reps; ++r) {
    b.truncate(pos);
    if (!b.begin_decode(1, pos).ok()) return -1;
    per.push_back(ev.time(b.stream(), [&] {
      for (int i = 0; i < n_new; ++i) b.replay_decode();
    }) / n_new);
  }
  return median(per);
}

// Environment (all optional): MK_CTX contexts ("32,4096,16384"); MK_REPS repeats per median (5); MK_SET the
// variants, run in the order listed (repeats allowed, e.g. "d,ms,ms,d" for an ABBA order): "d" the default; a
// variant of switches toggled from the default joined by '+': "fl" the publishing protocol (flags / counters),
// "lm" the dynamic LM head, "pf" prefetch, "o" attn_short off (version 8's inline attention); "g0".."g9" the prefetch gate at that many pages
// (MegakernelOptions::gate_pages; g0 = none); "pmax" all ring pages that fit, "p4" / "p3" max - 1 / max - 2 pages; in a '+' variant "pm" all pages, "gu1".."gu4"
// MlpGateUp's own prefetch gate
// (default "d,o"); MK_SET_LONG: the same for contexts above 32; MK_TIME=1: the
// in-kernel timing report of every variant's first run (else of the first variant, and of every variant at ctx 32);
// MK_TIME_SAMPLE=1: each timing report also for a sampled launch (temperature 1); MK_SAMPLE=1: each variant's
// 128-steps-per-launch figure also for sampled launches (temperature 1);
// MK_RING_PAGES=N plans the shared memory for N ring pages (MegakernelOptions::ring_pages: the room left grows s_x, so
// split attention streams with more warps); MK_GU_EXTRA=N ring pages added for MlpGateUp's gate where a page holds
// one row (MegakernelOptions::gate_up_extra_pages; 0 leaves that room to s_x); MK_INLINE_MAX=N keeps attention inline up to context N (0: always
// split; MegakernelOptions::inline_max); MK_V7=1 adds version 7's switch combinations, MK_FIXED=1 the fixed-chunk
// build, MK_LAYERED=0 leaves the layered peer out.
std::vector<int> env_ints(const char* name, std::vector<int> def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  std::vector<int> out;
  for (const char* p = v; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}
bool env_on(const char* name, bool def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) != 0 : def;
}
int g_ctx = 32;  // the context being measured (MK_SET_LONG applies above 32)
std::vector<std::string> variant_ids() {
  const char* v = g_ctx > 32 && std::getenv("MK_SET_LONG") ? std::getenv("MK_SET_LONG") : std::getenv("MK_SET");
  const std::string set = v && *v ? v : "d,o";
  std::vector<std::string> out;
  for (size_t a = 0; a <= set.size();) {
    size_t b = set.find(',', a);
    if (b == std::string::npos) b = set.size();
    if (b > a) out.push_back(set.substr(a, b - a));
    a = b + 1;
  }
  return out;
}
bool has_token(const std::string& id, const std::string& tok) {
  return ("+" + id + "+").find("+" + tok + "+") != std::string::npos;
}

void bench_shape(const std::string& name, double gbs) {
  auto c = shape_config(name);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.message().c_str());
    std::exit(1);
  }
  const double bytes = double(decode_bytes_per_token(*c, DType::BF16));
  const double floor_ms = bytes / (gbs * 1e9) * 1e3;
  std::printf("%s: %.3f GB/token, floor %.3f ms at %.0f GB/s\n", name.c_str(), bytes / 1e9, floor_ms, gbs);
  const int n_new = 128;
  const int reps = env_ints("MK_REPS", {5})[0];
  for (int ctx : env_ints("MK_CTX", {32, 4096, 16384})) {
    const int max_ctx = ctx + n_new;
    g_ctx = ctx;
    // Builds: the default (split-attention chunk ranges that follow pos: attn_chunks_dynamic, an even share of
    // [0, pos] per chunk), and at long contexts one with fixed chunks cut from max_context.
    for (int build = 0; build < (ctx > 32 && env_on("MK_FIXED", false) ? 2 : 1); ++build) {  // buffers freed before the next allocation
    auto w = cuda::random_device_weights(*c, 1234);
    if (!w) return (void)std::fprintf(stderr, "%s\n", w.message().c_str());
    megakernel::MegakernelOptions mo;
    if (build == 1) mo.attn_chunks_dynamic = !mo.attn_chunks_dynamic;
    mo.ring_pages = env_ints("MK_RING_PAGES", {mo.ring_pages})[0];  // shared memory planned for that many pages
    mo.gate_up_extra_pages = env_ints("MK_GU_EXTRA", {mo.gate_up_extra_pages})[0];  // 0: no extra MlpGateUp page
    mo.inline_max = env_ints("MK_INLINE_MAX", {mo.inline_max})[0];  // inline attention up to this context (0: split)
    auto b = megakernel::MegakernelBackend::create(*c, std::move(*w), max_ctx, mo);
    if (!b) return (void)std::fprintf(stderr, "megakernel: %s\n", b.message().c_str());
    if (ctx == 32) {
      std::printf("  %s\n", (*b)->schedule().summary().c_str());
      std::vector<int32_t> prompt(32, 7);
      std::vector<float> logits(static_cast<size_t>(c->n_vocab));
      auto t0 = std::chrono::steady_clock::now();
      if (auto st = (*b)->forward(prompt, 0, logits); !st.ok()) return (void)std::fprintf(stderr, "%s\n", st.message().c_str());
      double pre = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  prompt 32 tokens (one launch each): %.2f ms\n", pre);
    } else if (!(*b)->set_random_context(ctx).ok()) {
      return;
    }
    // Configurations in MK_SET's order: the default, or switches toggled from it (each name says which).
    struct Variant { std::string name; bool prefetch; bool flags, mid, rope; int pages = 0; int short_attn = -1; int lm_dynamic = -1; std::string id; int gate = -1; int gate_gu = -1; };
    const bool pf0 = (*b)->prefetch(), fl0 = (*b)->flag_publish(), mi0 = (*b)->mid_resid(), ro0 = (*b)->rope_early();
    const bool sh0 = (*b)->attn_short(), ld0 = (*b)->lm_dynamic();
    std::vector<Variant> vars;
    const int mp = (*b)->max_ring_pages();
    if (build == 1) vars.push_back({mo.attn_chunks_dynamic ? "dynamic chunks" : "fixed chunks", pf0, fl0, mi0, ro0, 0, -1, -1, "d"});
    for (const std::string& id : build == 1 ? std::vector<std::string>{} : variant_ids()) {
      Variant v{"", pf0, fl0, mi0, ro0, 0, -1, -1, id};
      if (id == "d") v.name = "default";
      else if (id == "pmax") v.pages = mp, v.name = cat("ring ", mp, " pages (all that fit)");
      else if (id == "p4") v.pages = mp - 1, v.name = cat("ring ", mp - 1, " pages");
      else if (id == "p3") v.pages = mp - 2, v.name = cat("ring ", mp - 2, " pages");
      else if (id.size() == 2 && id[0] == 'g' && id[1] >= '0' && id[1] <= '9') v.gate = id[1] - '0', v.name = cat("prefetch gate ", v.gate, " pages");
      else {
        if (has_token(id, "o")) {
          if ((*b)->attn_short_max() == 0) continue;
          v.short_attn = 0;
        }
        if (has_token(id, "fl")) v.flags = !fl0;
        if (has_token(id, "lm")) v.lm_dynamic = !ld0;
        if (has_token(id, "pf")) v.prefetch = !pf0;
        if (has_token(id, "pm")) v.pages = mp;                 // all ring pages that fit
        for (int n = 1; n <= 4; ++n)
          if (has_token(id, cat("gu", n))) v.gate_gu = n;       // MlpGateUp's own prefetch gate
        v.name = cat(id, ": flags ", int(v.flags));
      }
      vars.push_back(v);
    }
    // Version 7's switches (run-time, same build): flag-in-data publishing, the mid-layer residual, RoPE
    // cos/sin before the wait; each combination as bits (flags 1, mid 2, rope 4) toggled from the default.
    if (build == 0 && env_on("MK_V7", false))
      for (int v : {1, 2, 4, 3, 6, 7}) {
        const bool f = ((v & 1) != 0) != fl0, m = ((v & 2) != 0) != mi0, r = ((v & 4) != 0) != ro0;
        vars.push_back({cat("v7 switch: flags ", int(f), " mid_resid ", int(m), " rope_early ", int(r)), pf0, f, m, r, 0, -1, -1, cat("v7_", v)});
      }
    std::vector<std::string> timed_ids;
    for (const Variant& v : vars) {
      (*b)->set_prefetch(v.prefetch);
      (*b)->set_flag_publish(v.flags);
      (*b)->set_mid_resid(v.mid);
      (*b)->set_rope_early(v.rope);
      (*b)->set_attn_short(v.short_attn >= 0 ? v.short_attn != 0 : sh0);
      (*b)->set_lm_dynamic(v.lm_dynamic >= 0 ? v.lm_dynamic != 0 : ld0);
      const int pages0 = (*b)->ring_pages(), gate0 = (*b)->gate_pages(), gu0 = (*b)->gate_pages_gate_up();
      if (v.pages > 0) (*b)->set_ring_pages(v.pages);
      if (v.gate >= 0) (*b)->set_gate_pages(v.gate);
      if (v.gate_gu >= 0) (*b)->set_gate_pages_gate_up(v.gate_gu);
      for (int spl : {1, 128}) {
        if (spl == 1 && (ctx != 32 || &v != &vars[0])) continue;
        double ms = time_megakernel(**b, ctx, n_new, spl, reps);
        std::printf("  megakernel ctx %5d, %3d steps/launch, ring %d pages, %-40s (prefetch %d, flags %d, mid %d, attn_short %d, stage %d, mma warps %d, lm_dynamic %d): %.3f ms/token, %.0f GB/s, %.1f%% of floor\n",
                    ctx, spl, (*b)->ring_pages(), v.name.c_str(), int(v.prefetch), int(v.flags), int(v.mid),
                    int((*b)->attn_short() && (*b)->attn_short_max() > 0), (*b)->attn_stage(), (*b)->attn_mma_warps(), int((*b)->lm_dynamic_on()), ms, bytes / (ms * 1e-3) / 1e9,
                    100.0 * floor_ms / ms);
      }
      if (env_on("MK_SAMPLE", false)) {  // the sampled instance too (a change can cost it alone: RESULTS session 30)
        const double ms = time_megakernel(**b, ctx, n_new, 128, reps, true);
        std::printf("  megakernel ctx %5d, 128 steps/launch, sampled temp 1, %-40s: %.3f ms/token\n", ctx, v.name.c_str(), ms);
      }
      // In-kernel timestamps (a separate launch of 16 steps; the figures above ran without them): the default
      // at every context, at ctx 32 also the other variants.
      const bool first_run = std::find(timed_ids.begin(), timed_ids.end(), v.id) == timed_ids.end();
      const bool timed = first_run && (&v == &vars[0] || ctx == 32 || env_on("MK_TIME", false));
      if (timed) timed_ids.push_back(v.id);
      if (!timed || !(*b)->set_timing(true).ok()) {
        (*b)->set_ring_pages(pages0), (*b)->set_gate_pages(gate0), (*b)->set_gate_pages_gate_up(gu0);
        continue;
      }
      std::vector<int32_t> out(16);
      (*b)->truncate(ctx);
      auto st = (*b)->generate_greedy(1, ctx, out, 16);
      auto rep = (*b)->timing_report();
      if (st.ok() && rep) std::printf("  [%s] %s", v.name.c_str(), rep->c_str());
      if (env_on("MK_TIME_SAMPLE", false)) {  // the same for a sampled launch (temperature 1): SamplePartial, Argmax
        SamplingParams sp;
        sp.temperature = 1.f, sp.seed = 1;
        (*b)->truncate(ctx);
        st = (*b)->generate_sample(1, ctx, sp, 0, out, 16);
        rep = (*b)->timing_report();
        if (st.ok() && rep) std::printf("  [%s, sampled temp 1] %s", v.name.c_str(), rep->c_str());
      }
      (void)(*b)->set_timing(false);
      (*b)->set_ring_pages(pages0), (*b)->set_gate_pages(gate0), (*b)->set_gate_pages_gate_up(gu0);
    }
    (*b)->set_attn_short(sh0);
    (*b)->set_lm_dynamic(ld0);
    (*b)->set_prefetch(pf0);
    (*b)->set_flag_publish(fl0);
    (*b)->set_mid_resid(mi0);
    (*b)->set_rope_early(ro0);
    }
    if (!env_on("MK_LAYERED", true)) continue;
    auto wl = cuda::random_device_weights(*c, 1234);
    if (!wl) continue;
    auto l = cuda::CudaBackend::create(*c, std::move(*wl), max_ctx);
    if (!l) {
      std::printf("  layered: %s\n", l.message().c_str());
      continue;
    }
    if (!(*l)->set_random_context(ctx).ok()) continue;  // positions [0, ctx) cached
    double ms = time_layered(**l, ctx, n_new, reps);
    std::printf("  layered CUDA graph ctx %5d: %.3f ms/token, %.1f%% of floor\n", ctx, ms, 100.0 * floor_ms / ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered: a peer that aborts the process (as the layered path's MK_CHECK did once) must not take the
  // lines measured before it along.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> shapes;
  for (int i = 1; i < argc; ++i) shapes.push_back(argv[i]);
  if (shapes.empty()) shapes.push_back("llama-3.2-1b");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  auto ceil = cuda::measure_read_ceiling();
  if (!ceil) {
    std::fprintf(stderr, "%s\n", ceil.message().c_str());
    return 1;
  }
  const double gbs = ceil->tbps * 1e3;
  std::printf("GPU %s, %d SMs; read ceiling (cuda::measure_read_ceiling, %s): %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, ceil->best_shape.c_str(), gbs);
  for (const auto& s : shapes) bench_shape(s, gbs);
  return 0;
}
#endif  // MK_HAVE_CUDA
