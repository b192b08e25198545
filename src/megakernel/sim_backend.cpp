// SimBackend: the megakernel simulator behind the Backend interface, one simulated launch per token,
// each with a fresh random interleaving. Slow (a checked fp32 reference); for tests and debugging.
#include <algorithm>
#include <memory>

#include "cpu/ops.h"
#include "megakernel/sim.h"

namespace mk::megakernel {

namespace {

class SimBackend final : public Backend {
 public:
  // model_ is a copy of the views that shares (keeps alive) the model's storage; the simulator reads it.
  SimBackend(const Model& model, Schedule schedule, uint64_t seed)
      : model_(model), sim_(model_.config, model_.weights, std::move(schedule)), seed_(seed) {}
  const char* name() const override { return "megakernel-sim"; }
  int max_context() const override { return sim_.schedule().layout.max_context; }
  const ModelConfig& config() const override { return model_.config; }
  void truncate(int pos) override { n_cached_ = std::clamp(pos, 0, n_cached_); }

  Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) override {
    if (tokens.empty()) return make_error("megakernel-sim backend: forward called with no tokens");
    if (pos != n_cached_)
      return make_error("megakernel-sim backend: forward at position ", pos, " but ", n_cached_, " are cached");
    if (logits.size() != size_t(model_.config.n_vocab))
      return make_error("megakernel-sim backend: logits buffer holds ", logits.size(), " floats, expected ",
                        model_.config.n_vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto r = sim_.launch(tokens[i], pos + int(i), 1, seed_++);
      if (!r) return r.error();
      n_cached_ = pos + int(i) + 1;
      if (i + 1 == tokens.size()) {
        std::copy(r->logits.begin(), r->logits.end(), logits.begin());
        last_logits_ = std::move(r->logits);
      }
    }
    return {};
  }
  // "On the device" as the GPU backends: from the last forward's logits, the argmax (the Argmax instruction's rule,
  // cpu::argmax) or the draw decode_sample_until takes (sample_draw, the host Sampler's rule) at index `draw`.
  Expected<int32_t> sample_last(const SamplingParams& p, uint64_t draw) override {
    const bool greedy = p.argmax_only();
    if (!greedy && !can_decode_sample(p))
      return make_error("megakernel-sim backend: sample_last takes greedy parameters or a temperature and min-p");
    if (last_logits_.empty()) return make_error("megakernel-sim backend: sample_last before any forward");
    const int n = int(last_logits_.size());
    const SampleParams sp{p.temperature, p.min_p, p.seed, 0};
    const int32_t id = greedy ? cpu::argmax(last_logits_.data(), n) : sample_draw(last_logits_.data(), n, sp, draw);
    if (id < 0) return make_error("megakernel-sim backend: no finite logit to draw from");
    return id;
  }

  // K tokens per simulated launch (up to the simulator's step limit), greedy or drawn "on the device".
  bool has_decode_greedy() const override { return true; }
  bool can_decode_sample(const SamplingParams& p) const override {  // the same conditions as the GPU backends
    return !p.greedy() && (p.top_k == 0 || p.top_k >= model_.config.n_vocab) && p.top_p >= 1.f &&
           p.repetition_penalty == 1.f && sampling_params_error(p)[0] == '\0';
  }
  // Stop ids checked "on the device" (isa.h StopIds): the launch ends after the step that chose one.
  int max_stop_ids() const override { return MAX_STOP_IDS; }
  Expected<int> decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                    std::span<int32_t> out) override {
    auto stops = stop_set(stop_ids);
    if (!stops) return stops.error();
    return decode(token, pos, {}, *stops, out);
  }
  Expected<int> decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                    std::span<const int32_t> stop_ids, std::span<int32_t> out) override {
    if (!can_decode_sample(p))
      return make_error("megakernel-sim backend: decode_sample draws with a temperature and min-p only");
    auto stops = stop_set(stop_ids);
    if (!stops) return stops.error();
    return decode(token, pos, SampleParams{p.temperature, p.min_p, p.seed, first_draw}, *stops, out);
  }

 private:
  static Expected<StopIds> stop_set(std::span<const int32_t> ids) {
    if (ids.size() > size_t(MAX_STOP_IDS))
      return make_error("megakernel-sim backend: ", ids.size(), " stop ids, at most ", MAX_STOP_IDS, " are checked on the device");
    StopIds s;
    s.n = int32_t(ids.size());
    std::copy(ids.begin(), ids.end(), s.ids);
    return s;
  }
  std::vector<float> last_logits_;  // of the last forward (sample_last)
  // Tokens produced (out.size() unless a stop id ended the decode).
  Expected<int> decode(int32_t token, int pos, SampleParams sp, const StopIds& stops, std::span<int32_t> out) {
    if (pos != n_cached_)
      return make_error("megakernel-sim backend: decode at position ", pos, " but ", n_cached_, " are cached");
    size_t done = 0;
    while (done < out.size()) {
      const int k = int(std::min<size_t>(out.size() - done, 64));
      auto r = sim_.launch(token, pos + int(done), k, seed_++, false, sp, stops);
      if (!r) return r.error();
      std::copy(r->tokens.begin(), r->tokens.end(), out.begin() + std::ptrdiff_t(done));
      const size_t ran = r->tokens.size();
      done += ran, sp.first_draw += uint64_t(ran), token = out[done - 1];
      n_cached_ = pos + int(done);
      if (stops.has(out[done - 1])) break;  // a stop id (the launch ended there, or it was its last step)
    }
    return int(done);
  }

  Model model_;
  Simulator sim_;
  uint64_t seed_;
  int n_cached_ = 0;
};

}  // namespace

Expected<std::unique_ptr<Backend>> make_sim_backend(const Model& model, int n_sm, int max_context, uint64_t seed) {
  // max_context <= 0: the model's max_position, capped at 1024 (the simulator tracks every cached
  // element's last writer and readers, ~32 bytes per float).
  if (max_context <= 0) max_context = std::min(model.config.max_position > 0 ? model.config.max_position : 1024, 1024);
  ScheduleOptions o;
  o.n_sm = n_sm;
  o.max_context = max_context;
  auto s = build_schedule(model.config, o);
  if (!s) return s.error();
  return std::unique_ptr<Backend>(std::make_unique<SimBackend>(model, std::move(*s), seed));
}

}  // namespace mk::megakernel
