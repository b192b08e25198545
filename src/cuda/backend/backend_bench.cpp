// Prefill and decode timing of CudaBackend (see backend_bench.h).
#include "cuda/backend/backend_bench.h"

#include <algorithm>
#include <random>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(size_t n) : ev(n) {
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto& e : ev) cudaEventDestroy(e);
  }
  double ms(size_t a, size_t b) const {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, ev[a], ev[b]));
    return t;
  }
};

Expected<PrefillTiming> time_prefill(CudaBackend& b, int n, int repeats) {
  auto tokens = random_tokens(n, b.config().n_vocab, 42u + uint32_t(n));
  cudaStream_t s = b.stream();
  Events ev(2);
  std::vector<double> ts;
  double eager = 0;
  // Two warm-ups. The second is still eager (CudaBackendOptions::prefill_graph_at: the graph is captured after the
  // third use), so it gives what a prompt length seen for the first time costs; the repeats mostly replay the graph.
  for (int r = -2; r < repeats; ++r) {
    b.truncate(0);
    CUDA_CHECK(cudaEventRecord(ev.ev[0], s));
    MK_TRY(b.enqueue_prefill_only(tokens, 0));
    CUDA_CHECK(cudaEventRecord(ev.ev[1], s));
    MK_TRY(cuda_status(cudaEventSynchronize(ev.ev[1]), "timing prefill"));
    if (r == -1) eager = ev.ms(0, 1);
    if (r >= 0) ts.push_back(ev.ms(0, 1));
  }
  b.truncate(0);
  return PrefillTiming{n, median(ts), eager};
}

Expected<DecodeTiming> time_decode(CudaBackend& b, int context, int n_tokens, int repeats, double weight_bytes,
                                   int max_real_prefill, const SamplingParams& sampling) {
  const ModelConfig& c = b.config();
  if (context + n_tokens + 1 > b.max_context())
    return make_error("decode at context ", context, " + ", n_tokens, " tokens exceeds the backend's context ",
                      b.max_context());
  DecodeTiming t;
  t.context = context;
  b.truncate(0);
  if (context == 0) {
  } else if (context <= max_real_prefill) {
    auto prompt = random_tokens(context, c.n_vocab, 7u);
    MK_TRY(b.enqueue_prefill_only(prompt, 0));
  } else {
    MK_TRY(b.set_random_context(context));
    t.random_context = true;
  }
  MK_TRY(cuda_status(cudaStreamSynchronize(b.stream()), "preparing decode"));
  cudaStream_t s = b.stream();
  const int32_t first = 1000 % c.n_vocab;
  // Warm-up.
  // K steps per replay (CudaBackendOptions::graph_steps): per-token = per-replay time / K.
  const int k = b.decode_steps_per_replay(), n_replays = std::max(1, n_tokens / k);
  MK_TRY(b.begin_decode(first, context, sampling));
  for (int i = 0; i < std::max(1, 16 / k); ++i) b.replay_decode_k();
  MK_TRY(cuda_status(cudaStreamSynchronize(s), "decode warm-up"));
  Events ev(size_t(n_replays) + 1);
  std::vector<double> per_token, means;
  for (int r = 0; r < repeats; ++r) {
    MK_TRY(b.begin_decode(first, context, sampling));
    CUDA_CHECK(cudaEventRecord(ev.ev[0], s));
    for (int i = 0; i < n_replays; ++i) {
      b.replay_decode_k();
      CUDA_CHECK(cudaEventRecord(ev.ev[size_t(i) + 1], s));
    }
    MK_TRY(cuda_status(cudaStreamSynchronize(s), "timing decode"));
    for (int i = 0; i < n_replays; ++i) per_token.push_back(ev.ms(size_t(i), size_t(i) + 1) / k);
    // Back to back, no events in between (what a generation loop sees).
    MK_TRY(b.begin_decode(first, context, sampling));
    CUDA_CHECK(cudaEventRecord(ev.ev[0], s));
    for (int i = 0; i < n_replays; ++i) b.replay_decode_k();
    CUDA_CHECK(cudaEventRecord(ev.ev[1], s));
    MK_TRY(cuda_status(cudaStreamSynchronize(s), "timing decode"));
    means.push_back(ev.ms(0, 1) / (n_replays * k));
  }
  t.ms_median = median(per_token);
  t.ms_mean = median(means);
  double mean_ctx = context + n_tokens / 2.0;
  t.bytes_per_token = weight_bytes + 2.0 * c.n_layer * mean_ctx * c.kv_dim() * 2.0;
  b.truncate(0);
  return t;
}

// Positions [0, context) cached: a real prefill up to max_real_prefill, else random K/V.
Status prepare_context(CudaBackend& b, int context, int max_real_prefill, bool* random) {
  b.truncate(0);
  *random = false;
  if (context > max_real_prefill) {
    MK_TRY(b.set_random_context(context));
    *random = true;
  } else if (context > 0) {
    MK_TRY(b.enqueue_prefill_only(random_tokens(context, b.config().n_vocab, 7u), 0));
  }
  return cuda_status(cudaStreamSynchronize(b.stream()), "preparing decode");
}

}  // namespace

Expected<StopTiming> time_stop_calls(CudaBackend& b, int context, int n_tokens, int repeats,
                                     const SamplingParams& sampling, int max_real_prefill) {
  const ModelConfig& c = b.config();
  if (context + n_tokens + 1 > b.max_context())
    return make_error("decode at context ", context, " + ", n_tokens, " tokens exceeds the backend's context ",
                      b.max_context());
  bool random = false;
  MK_TRY(prepare_context(b, context, max_real_prefill, &random));
  const int32_t first = 1000 % c.n_vocab;
  const int32_t never[2] = {c.n_vocab, c.n_vocab + 1};  // outside the vocabulary: never chosen
  std::vector<int32_t> out(static_cast<size_t>(n_tokens));
  Backend& be = b;
  auto call = [&](std::span<const int32_t> stops, std::span<int32_t> o) -> Expected<int> {
    b.truncate(context);
    return sampling.greedy() ? be.decode_greedy_until(first, context, stops, o)
                             : be.decode_sample_until(first, context, sampling, 0, stops, o);
  };
  auto first_tok = call(never, std::span(out).first(1));  // also builds the until graphs
  if (!first_tok) return first_tok.error();
  const int32_t stop_first[1] = {out[0]};
  Events ev(2);
  cudaStream_t s = b.stream();
  // kind 0: plain, 1: never-matching stop ids, 2: stop at the first token, 3: one token.
  std::vector<double> ms[4];
  for (int r = -1; r < repeats; ++r)  // one warm-up
    for (int kind = 0; kind < 4; ++kind) {
      std::span<int32_t> o = kind == 3 ? std::span(out).first(1) : std::span(out);
      std::span<const int32_t> stops = kind == 1 ? std::span<const int32_t>(never)
                                       : kind == 2 ? std::span<const int32_t>(stop_first)
                                                   : std::span<const int32_t>();
      CUDA_CHECK(cudaEventRecord(ev.ev[0], s));
      auto n = call(stops, o);
      if (!n) return n.error();
      const int want = kind == 2 || kind == 3 ? 1 : n_tokens;
      if (*n != want)
        return make_error("stop bench: a call of ", o.size(), " tokens produced ", *n, ", expected ", want);
      CUDA_CHECK(cudaEventRecord(ev.ev[1], s));
      MK_TRY(cuda_status(cudaEventSynchronize(ev.ev[1]), "timing decode calls"));
      if (r >= 0) ms[kind].push_back(ev.ms(0, 1));
    }
  b.truncate(0);
  StopTiming t;
  t.context = context;
  t.n_tokens = n_tokens;
  t.ms_plain = median(ms[0]) / n_tokens;
  t.ms_stops = median(ms[1]) / n_tokens;
  t.ms_stop_first = median(ms[2]);
  t.ms_one = median(ms[3]);
  return t;
}

Expected<BackendTiming> time_backend(CudaBackend& b, const std::vector<int>& prefill_lengths,
                                     const std::vector<int>& contexts, int n_tokens, int repeats,
                                     double weight_bytes_per_token, int max_real_prefill,
                                     const SamplingParams& sampling) {
  BackendTiming out;
  for (int n : prefill_lengths) {
    if (n > b.max_context()) return make_error("prefill of ", n, " tokens exceeds the context ", b.max_context());
    auto p = time_prefill(b, n, repeats);
    if (!p) return p.error();
    out.prefill.push_back(*p);
  }
  for (int ctx : contexts) {
    auto d = time_decode(b, ctx, n_tokens, repeats, weight_bytes_per_token, max_real_prefill, sampling);
    if (!d) return d.error();
    out.decode.push_back(*d);
  }
  return out;
}

}  // namespace mk::cuda
