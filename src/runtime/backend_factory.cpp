// Backend factory: the table of (device, kind) -> factory (see backend_factory.h).
#include "runtime/backend_factory.h"

#include <cstdio>
#include <mutex>
#include <vector>

#include "cpu/cpu_backend.h"
#include "megakernel/model.h"
#include "megakernel/sim.h"

// CUDA backends register when the build has them (MK_HAVE_CUDA) and their headers exist.
#if defined(MK_HAVE_CUDA) && __has_include("cuda/backend/cuda_backend.h")
#include "cuda/backend/cuda_backend.h"
#define MK_HAVE_CUDA_LAYERED 1
#endif
#if defined(MK_HAVE_CUDA) && __has_include("megakernel/device/megakernel_backend.h")
#include "megakernel/device/megakernel_backend.h"
#define MK_HAVE_CUDA_MEGAKERNEL 1
#endif

namespace mk {
namespace {

constexpr int SIM_N_SM = 8;  // simulated SMs of `--backend megakernel-sim`

struct Entry {
  std::string device, kind;
  BackendFactory factory;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    // Built-in backends: one entry each; the first of a device is its default.
    auto add = [&](const char* device, const char* kind, BackendFactory f) {
      reg->entries.push_back({device, kind, std::move(f)});
    };
    add("cpu", "reference", [](const Model& m, const BackendOptions& o) -> Expected<std::unique_ptr<Backend>> {
      return make_cpu_backend(m, o.max_context);
    });
    // The megakernel's instruction stream on simulated SMs (slow; checks every dependency).
    add("cpu", "megakernel-sim", [](const Model& m, const BackendOptions& o) {
      return megakernel::make_sim_backend(m, SIM_N_SM, o.max_context, /*seed=*/0);
    });
#ifdef MK_HAVE_CUDA_LAYERED
    add("cuda", "layered", [](const Model& m, const BackendOptions& o) { return make_cuda_backend(m, o.max_context); });
#endif
#ifdef MK_HAVE_CUDA_MEGAKERNEL
    // A model or context the megakernel's schedule cannot place is refused before launch; the step then
    // runs on the layered path (same KV layout), with the reason on stderr.
    add("cuda", "megakernel", [](const Model& m, const BackendOptions& o) -> Expected<std::unique_ptr<Backend>> {
      auto mk_backend = megakernel::make_megakernel_backend(m, o.max_context);
      if (mk_backend) return std::move(*mk_backend);
#ifdef MK_HAVE_CUDA_LAYERED
      std::fprintf(stderr, "%s; falling back to the layered CUDA path\n", mk_backend.message().c_str());
      return make_cuda_backend(m, o.max_context);
#else
      return mk_backend.error();
#endif
    });
#endif
    return reg;
  }();
  return *r;
}

std::string kinds_of(const std::vector<Entry>& entries, const std::string& device) {
  std::string out;
  for (const auto& e : entries)
    if (e.device == device) out += (out.empty() ? "" : ", ") + e.kind;
  return out;
}

// A GPU backend's first-use costs (lazy module loading, GEMM plans, decode graph capture: tens of ms) are paid here,
// at start-up, instead of by the first request's time to first token and decode speed: a 2-token prefill, one
// decode step, two steps of on-device greedy decoding, and for sampled requests the first token's draw
// (sample_last) and two steps of sampled decoding with a temperature and with top-p (the megakernel backend decodes
// top-p on its embedded layered backend: those decode graphs are captured here), each with and without a stop id
// where the backend checks them on the device; then the cache is emptied.
Status warm_up(Backend& b) {
  if (b.max_context() < 5) return {};
  std::vector<float> logits(size_t(b.config().n_vocab));
  const int32_t t[2] = {0, 0};
  SamplingParams temp, top_p;
  temp.temperature = top_p.temperature = 1.f;
  top_p.top_p = 0.9f;
  MK_TRY(b.forward(t, 0, logits));
  if (b.can_decode_sample(top_p)) MK_TRY(b.sample_last(top_p, 0));  // the prefill's logits
  MK_TRY(b.forward({t, 1}, 2, logits));
  if (b.can_decode_sample(temp)) MK_TRY(b.sample_last(temp, 0));  // a decode step's (the megakernel's own buffer)
  int pos = 3;
  int32_t out[2];
  if (b.has_decode_greedy()) {
    MK_TRY(b.decode_greedy(0, pos, out));
    pos += 2;
  }
  // The stop-checking instances: a stop id no warm-up token is likely to be (a shorter call is fine too).
  const int32_t stop[1] = {b.config().n_vocab - 1};
  const bool stops = b.max_stop_ids() > 0;
  if (b.has_decode_greedy() && stops && pos + 2 <= b.max_context()) {
    auto n = b.decode_greedy_until(0, pos, stop, out);
    if (!n) return n.error();
    pos += *n;
  }
  for (const SamplingParams& p : {temp, top_p})
    for (bool with_stop : {false, true}) {
      if (!b.can_decode_sample(p) || (with_stop && !stops) || pos + 2 > b.max_context()) continue;
      auto n = b.decode_sample_until(0, pos, p, 1, with_stop ? std::span<const int32_t>(stop) : std::span<const int32_t>(), out);
      if (!n) return n.error();
      pos += *n;
    }
  b.truncate(0);
  return {};
}

}  // namespace

void register_backend(const std::string& device, const std::string& kind, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& e : r.entries)
    if (e.device == device && e.kind == kind) {
      e.factory = std::move(factory);
      return;
    }
  r.entries.push_back({device, kind, std::move(factory)});
}

Expected<std::unique_ptr<Backend>> make_backend(const Model& model, const BackendOptions& options) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    if (options.device != "cpu" && options.device != "cuda")
      return make_error("unknown device '", options.device, "': expected cpu or cuda");
    const std::string kinds = kinds_of(r.entries, options.device);
    if (kinds.empty()) {
      if (options.device == "cuda")
        return make_error("CUDA backend not built/available: this build has no CUDA backend (it needs nvcc at "
                          "build time and a GPU at run time); use --device cpu");
      return make_error("no backend registered for device '", options.device, "'");
    }
    for (const auto& e : r.entries)
      if (e.device == options.device && (options.kind.empty() || e.kind == options.kind)) {
        factory = e.factory;
        break;
      }
    if (!factory)
      return make_error("unknown backend '", options.kind, "' for device ", options.device, ": available: ", kinds);
  }
  const int max_pos = model.config.max_position;
  if (options.max_context < 0 || (max_pos > 0 && options.max_context > max_pos))
    return make_error("max context ", options.max_context, " is out of range: expected 1..", max_pos,
                      " (the model's max_position_embeddings), or 0 for the backend's default");
  auto backend = factory(model, options);
  if (backend && options.device == "cuda") {
    if (Status st = warm_up(**backend); !st)
      return make_error("warming up the ", (*backend)->name(), " backend: ", st.message());
  }
  return backend;
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& e : r.entries) out.push_back(e.device + "/" + e.kind);
  return out;
}

}  // namespace mk
