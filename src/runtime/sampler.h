// Sampler: picks the next token from a row of logits. Processors run in Hugging Face transformers' order:
// repetition penalty -> (greedy argmax) -> temperature -> top-k -> top-p -> min-p -> draw. Each filter is
// a free function over a candidate list so tests can check it on tiny vocabularies.
// Candidates are (logit - max finite logit) / temperature. Draw rule (reproducible on a GPU):
// u = philox_uniform(seed, draw index); the kept candidates are walked
// in ascending id order accumulating exp(logit - max) in double; the first whose running sum exceeds
// u * total is chosen. Test: tests/runtime/test_sampler.cpp.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "megakernel/sampling.h"

namespace mk {

struct Candidate {
  float logit;
  int32_t id;
};

// Ranges of every parameter; the error names the parameter.
Status validate(const SamplingParams& p);

// HF RepetitionPenaltyLogitsProcessor: each distinct id of `history` once: logit > 0 -> logit / r,
// else logit * r. Ids outside [0, logits.size()) are ignored.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float r);

// Lowest id among the largest logits (torch.argmax's tie rule). NaN logits are never chosen.
int32_t argmax(std::span<const float> logits);

// Filters keep at least one candidate; the order of `c` is not preserved.
void filter_top_k(std::vector<Candidate>& c, int k);      // keeps logits >= the k-th largest
void filter_top_p(std::vector<Candidate>& c, float p);    // smallest prefix (by logit desc, id asc) with mass >= p
void filter_min_p(std::vector<Candidate>& c, float p);    // keeps prob >= p * max prob

// The draw rule above for a uniform u in [0, 1); sorts `c` by id.
int32_t draw_candidate(std::vector<Candidate>& c, double u);

// Sampler::sample's draw after the repetition penalty and the greedy shortcut: the candidates of p's temperature
// (logits shifted by their finite max; non-finite ones dropped), top-k, top-p and min-p, drawn with the uniform u.
// -1 when no logit is finite. scratch: the candidates' storage, reused across calls.
int32_t draw_filtered(std::span<const float> logits, const SamplingParams& p, double u, std::vector<Candidate>& scratch);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p) {}
  // Chooses the next id. `logits` ([n_vocab]) is modified (penalty, temperature). `history` holds the
  // prompt and the tokens generated so far (for the repetition penalty).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // Back to draw 0: the next sample() repeats the first draw of a fresh sampler with the same seed.
  void reset() { n_draws_ = 0; }
  // Skips n draws (taken elsewhere, e.g. by Backend::decode_sample from draw n_draws()).
  void advance(uint64_t n) { n_draws_ += n; }
  uint64_t n_draws() const { return n_draws_; }
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  uint64_t n_draws_ = 0;           // draws taken: the Philox counter of the next one
  std::vector<Candidate> scratch_;  // [n_vocab] at most, reused across calls
};

}  // namespace mk
