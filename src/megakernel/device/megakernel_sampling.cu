// MegakernelBackend's sampled entry points (see megakernel_backend.h): which parameters the Argmax instruction draws
// and which go to the layered backend (top-k, top-p: decode_layered over the shared KV cache), and the first token's
// draw from the last forward's logits (sample_last). Tests: tests/gpu/test_sample_last.cu, test_megakernel_sample.cu.
#include <algorithm>

#include "cuda/backend/cuda_backend.h"
#include "cuda/common/cuda_check.h"
#include "megakernel/device/megakernel_backend.h"

namespace mk::megakernel {

using cuda::cuda_status;

bool MegakernelBackend::draws_in_argmax(const SamplingParams& p) const {
  // The Argmax instruction's draw (ops/sample.cuh): a temperature and min-p (as the layered backend), in the
  // instances with the weight ring.
  return n_pages_ > 0 && !p.greedy() && (p.top_k == 0 || p.top_k >= config_.n_vocab) && p.top_p >= 1.f &&
         p.repetition_penalty == 1.f && sampling_params_error(p)[0] == '\0';
}

bool MegakernelBackend::can_decode_sample(const SamplingParams& p) const {
  return draws_in_argmax(p) || (prefill_ && prefill_->can_decode_sample(p));
}

namespace {

Error sample_params_error(const SamplingParams& p) {
  return make_error("megakernel: no device draw for temperature ", p.temperature, ", top_k ", p.top_k, ", top_p ",
                    p.top_p, ", min_p ", p.min_p, ", repetition_penalty ", p.repetition_penalty,
                    " (a repetition penalty is applied on the host; top-k / top-p need the layered prefill)");
}

}  // namespace

Status MegakernelBackend::generate_sample(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                          std::span<int32_t> out, int steps_per_launch) {
  if (!draws_in_argmax(p))
    return make_error("megakernel: generate_sample draws with a temperature and min-p only (top_k 0, top_p 1, "
                      "repetition_penalty 1, the weight ring on), got temperature ", p.temperature, ", top_k ", p.top_k,
                      ", top_p ", p.top_p, ", repetition_penalty ", p.repetition_penalty);
  auto n = generate_until(token, pos, out, steps_per_launch, SampleParams{p.temperature, p.min_p, p.seed, first_draw}, {});
  if (!n) return n.error();
  return {};
}

Expected<int> MegakernelBackend::decode_sample_until(int32_t token, int pos, const SamplingParams& p,
                                                     uint64_t first_draw, std::span<const int32_t> stop_ids,
                                                     std::span<int32_t> out) {
  if (draws_in_argmax(p))
    return generate_until(token, pos, out, MAX_STEPS, SampleParams{p.temperature, p.min_p, p.seed, first_draw}, stop_ids);
  if (prefill_ && prefill_->can_decode_sample(p)) return decode_layered(token, pos, p, first_draw, stop_ids, out);
  return sample_params_error(p);
}

Expected<int> MegakernelBackend::decode_layered(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                                std::span<const int32_t> stop_ids, std::span<int32_t> out) {
  if (pos != n_cached_) return make_error("megakernel: decode at position ", pos, " but ", n_cached_, " are cached");
  if (pos + int64_t(out.size()) > max_context_)
    return make_error("megakernel: ", pos + out.size(), " positions exceed the context of ", max_context_);
  if (stop_ids.size() > size_t(max_stop_ids()))
    return make_error("megakernel: ", stop_ids.size(), " stop ids, at most ", max_stop_ids(), " are checked on the device");
  last_logits_ = Logits::None;
  if (out.empty()) return 0;
  // The layered backend decodes from pos over the shared cache (the megakernel's own launches have finished: every
  // call synchronises its stream before returning).
  MK_TRY(prefill_->set_cached(pos));
  const bool its_stops = stop_ids.empty() || prefill_->max_stop_ids() >= int(stop_ids.size());
  const size_t piece = its_stops ? out.size() : size_t(LAYERED_STOP_PIECE);
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  size_t done = 0;
  bool stopped = false;
  while (done < out.size() && !stopped) {
    const std::span<int32_t> o = out.subspan(done, std::min(piece, out.size() - done));
    auto n = prefill_->decode_sample_until(done == 0 ? token : out[done - 1], pos + int(done), p, first_draw + done,
                                           its_stops ? stop_ids : std::span<const int32_t>(), o);
    if (!n)  // n_cached_ stays pos: the callers reset after a failure (the engine does)
      return make_error("megakernel: decoding on the layered backend (top-k / top-p) at position ", pos + done, ": ",
                        n.message());
    if (*n < 1 || *n > int(o.size()))
      return make_error("megakernel: the layered backend produced ", *n, " tokens for a call of ", o.size());
    const auto first_stop = std::find_if(o.begin(), o.begin() + *n, is_stop);
    stopped = first_stop != o.begin() + *n || *n < int(o.size());
    done += size_t(first_stop == o.begin() + *n ? *n : first_stop - o.begin() + 1);
  }
  std::fill(out.begin() + std::ptrdiff_t(done), out.end(), -1);
  n_cached_ = pos + int(done);  // the stop id, if any, is not fed
  prefill_->truncate(n_cached_);
  return int(done);
}

Expected<int32_t> MegakernelBackend::sample_last(const SamplingParams& p, uint64_t draw) {
  const bool greedy = p.argmax_only();
  if (!greedy && !can_decode_sample(p)) return sample_params_error(p);
  switch (last_logits_) {
    case Logits::Prefill: return prefill_->sample_last(p, draw);  // greedy too: the layered prefill's argmax
    case Logits::Own: {
      // Greedy: the 1-token step's Argmax instruction already chose (put_token: tokens[step + 1], lowest id on ties).
      if (greedy) return cuda::drawn_token(stream_, tokens_ + 1, config_.n_vocab, "megakernel: sample_last");
      const float* logits = ws_ + schedule_.layout.logits;  // written by the last launch (forward synchronised it)
      if (prefill_) return prefill_->sample_logits(logits, p, draw);
      // No layered backend: a temperature / min-p draw (draws_in_argmax) by the allocating launcher.
      const cuda::SampleRule rule{p.temperature, 0, 1.f, p.min_p};
      cuda::sample_token(cuda::Stream(stream_, false), logits, config_.n_vocab, rule, p.seed, draw, out_tokens_,
                         std::min(64, n_sm_));
      return cuda::drawn_token(stream_, out_tokens_, config_.n_vocab, "megakernel: sample_last");
    }
    case Logits::None: break;
  }
  return make_error("megakernel: sample_last draws from the logits of the last forward(), and none is pending (a "
                    "decode call or no forward since the backend was made)");
}

}  // namespace mk::megakernel
