// CudaBackend: creation, buffers, and the Backend entry points (see cuda_backend.h). The kernels each step
// enqueues are in steps.cu.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/ops.h"
#include "cuda/common/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/ops/matvec.h"

namespace mk {
namespace cuda {
namespace {

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& c, DeviceWeights w, int max_context, const CudaBackendOptions& opt)
    : config_(c), weights_(std::move(w)), opt_(opt), max_context_(max_context) {}

CudaBackend::~CudaBackend() {
  if (stream_ && !prefill_graphs_.empty()) cudaStreamSynchronize(stream_);  // no prefill graph launch left
  for (PrefillGraph& g : prefill_graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  for (DecodeGraph& g : graphs_) {
    if (g.one) cudaGraphExecDestroy(g.one);
    if (g.k) cudaGraphExecDestroy(g.k);
  }
  if (stream_) cudaStreamDestroy(stream_);
  if (arena_) cudaFree(arena_);
  if (attn_ws_) cudaFree(attn_ws_);
}

Expected<std::unique_ptr<CudaBackend>> CudaBackend::create(const ModelConfig& config, DeviceWeights weights,
                                                           int max_context, const CudaBackendOptions& opt,
                                                           const DeviceKvCache* shared_kv) {
  if (max_context <= 0) return make_error("max_context must be positive, got ", max_context);
  if (config.head_dim % 32 != 0 || config.head_dim > 256)
    return make_error("head_dim ", config.head_dim, " is not supported by the CUDA backend (a multiple of 32, <= 256)");
  if (config.n_embd % 8 != 0 || config.n_ff % 8 != 0)
    return make_error("hidden_size and intermediate_size must be multiples of 8 for the CUDA backend (got ",
                      config.n_embd, ", ", config.n_ff, ")");
  if (opt.sample_blocks < 1 || opt.sample_blocks > 1024)
    return make_error("sample_blocks must be in [1, 1024] blocks drawing a sampled token, got ", opt.sample_blocks);
  int dev = 0, n_sm = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && opt.sample_blocks > n_sm)
    return make_error("sample_blocks ", opt.sample_blocks, " exceeds the GPU's ", n_sm,
                      " SMs (the blocks of a top-k / top-p draw wait for each other: all must be resident)");
  if (opt.graph_steps < 1 || opt.graph_steps > 256)
    return make_error("graph_steps must be in [1, 256] decode steps per graph launch, got ", opt.graph_steps);
  std::unique_ptr<CudaBackend> b(new CudaBackend(config, std::move(weights), max_context, opt));
  if (shared_kv && shared_kv->capacity() < max_context)
    return make_error("the shared KV cache holds ", shared_kv->capacity(), " positions, fewer than max_context ",
                      max_context);
  MK_TRY(b->init(shared_kv));
  return std::move(b);
}

Status CudaBackend::init(const DeviceKvCache* shared_kv) {
  const ModelConfig& c = config_;
  // Measurement overrides of the prefill graph settings (CudaBackendOptions::prefill_graphs), for A/B runs of one
  // binary.
  if (const char* e = std::getenv("MK_PREFILL_GRAPHS")) opt_.prefill_graphs = std::atoi(e);
  if (const char* e = std::getenv("MK_PREFILL_GRAPH_AT")) opt_.prefill_graph_at = std::atoi(e);
  if (opt_.prefill_graphs < 0 || opt_.prefill_graph_at < 1)
    return make_error("prefill_graphs must be >= 0 and prefill_graph_at >= 1, got ", opt_.prefill_graphs, " and ",
                      opt_.prefill_graph_at);
  if (shared_kv) kv_.alias(*shared_kv);
  else MK_TRY(kv_.init(c, max_context_));
  MK_TRY(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream"));
  auto g = Gemm::create();
  if (!g) return g.error();
  gemm_ = std::move(*g);

  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), V = c.n_vocab, C = opt_.prefill_chunk;
  void* sample_scratch = nullptr;  // grid_sample's (ops/sample.h), zeroed with the arena as the rest
  std::vector<std::pair<void**, size_t>> bufs = {
      {reinterpret_cast<void**>(&state_), sizeof(StepState)},
      {reinterpret_cast<void**>(&tokens_out_), size_t(max_context_) * 4},
      {reinterpret_cast<void**>(&x_), E * 4},
      {reinterpret_cast<void**>(&qkv_), (Q + 2 * KV) * 4},
      {reinterpret_cast<void**>(&q_), Q * 2},
      {reinterpret_cast<void**>(&attn_), Q * 2},
      {reinterpret_cast<void**>(&h_), F * 4},
      {reinterpret_cast<void**>(&hb_), F * 2},
      {reinterpret_cast<void**>(&logits_), V * 4},
      {reinterpret_cast<void**>(&drawn_), 4},
      {&sample_scratch, grid_sample_scratch_bytes(opt_.sample_blocks)},
      {reinterpret_cast<void**>(&inv_freq_), size_t(c.head_dim) * 2},
      {reinterpret_cast<void**>(&tokens_), C * 4},
      {reinterpret_cast<void**>(&px_), C * E * 4},
      {reinterpret_cast<void**>(&pxn_), C * E * 2},
      {reinterpret_cast<void**>(&pqkv_), C * (Q + 2 * KV) * 4},
      {reinterpret_cast<void**>(&pq_), C * Q * 2},
      {reinterpret_cast<void**>(&pattn_), C * Q * 2},
      {reinterpret_cast<void**>(&pgu_), C * 2 * F * 4},
      {reinterpret_cast<void**>(&ph_), C * F * 2},
  };
  size_t total = 0;
  for (auto& b : bufs) total += align_up(b.second);
  size_t free_b = 0, total_b = 0;
  MK_TRY(cuda_status(cudaMemGetInfo(&free_b, &total_b), "querying GPU memory"));
  if (total > free_b)
    return make_error("activation buffers need ", total >> 20, " MiB of GPU memory but only ", free_b >> 20,
                      " MiB are free");
  MK_TRY(cuda_status(cudaMalloc(&arena_, total), "allocating activation buffers"));
  MK_TRY(cuda_status(cudaMemset(arena_, 0, total), "clearing activation buffers"));
  char* p = static_cast<char*>(arena_);
  for (auto& b : bufs) {
    *b.first = p;
    p += align_up(b.second);
  }
  sample_scratch_ = grid_sample_scratch_at(sample_scratch, opt_.sample_blocks);
  std::vector<float> inv_freq;
  cpu::rope_inv_freq(inv_freq, c.rope, c.head_dim);
  MK_TRY(cuda_status(cudaMemcpy(inv_freq_, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice),
                     "uploading RoPE frequencies"));
  // cuda/attention/ serves head dims 64 and 128; others use ops/attention_simple.
  if (opt_.attention_lib && attention_lib_available() && (c.head_dim == 64 || c.head_dim == 128)) {
    // Decode variants for sequences of at most 256, 1024, 4096, ... positions and the whole cache; one whose split
    // count equals the next longer one's is left out (that one serves its sequences too).
    const int cap = kv_.capacity();
    std::vector<DecodeGraph> v;
    for (int64_t n = 256; n < cap; n *= 4) v.push_back({int(n), attention_decode_splits(1, c.n_kv_head, int(n))});
    v.push_back({cap, attention_decode_splits(1, c.n_kv_head, cap)});
    for (size_t i = 0; i < v.size(); ++i)
      if (i + 1 == v.size() || v[i].n_split != v[i + 1].n_split) graphs_.push_back(v[i]);
    for (const DecodeGraph& g : graphs_) {
      AttentionOptions o;
      o.decode_splits = g.n_split;
      attn_ws_bytes_ =
          std::max(attn_ws_bytes_, attention_decode_workspace_bytes(1, c.n_head, c.n_kv_head, c.head_dim, cap, o));
    }
    MK_TRY(cuda_status(cudaMalloc(&attn_ws_, std::max<size_t>(attn_ws_bytes_, 256)), "allocating attention workspace"));
  } else {
    opt_.attention_lib = false;
    graphs_ = {{kv_.capacity(), 0}};
  }
  rope_in_attn_ = opt_.attention_lib &&
                  (opt_.rope_in_attention > 0 ||
                   (opt_.rope_in_attention < 0 && c.qk_norm && attention_decode_rope_fits(c.n_head, c.n_kv_head, c.head_dim)));
  // The prefill projections' algorithm choices and first launches for every prompt length bucket, now rather than
  // in the first request of each length (~8 ms to its first token, bench/RESULTS.md session 8). Layer 0's weights
  // on the (zeroed) prefill buffers: every layer has the same shapes.
  const int M = std::min(int(C), max_context_);
  const DeviceLayer& w = weights_.layers[0];
  gemm_->prepare(stream_, pqkv_, DType::F32, pxn_, w.wqkv, M, int(Q + 2 * KV), int(E));
  gemm_->prepare(stream_, px_, DType::F32, pattn_, w.wo, M, int(E), int(Q), 1.f);
  gemm_->prepare(stream_, pgu_, DType::F32, pxn_, w.w_gate_up, M, int(2 * F), int(E));
  gemm_->prepare(stream_, px_, DType::F32, ph_, w.w_down, M, int(E), int(F), 1.f);
  return cuda_status(cudaStreamSynchronize(stream_), "preparing the prefill GEMMs");
}

Status CudaBackend::check_step(std::span<const int32_t> tokens, int pos) const {
  if (tokens.empty()) return make_error("forward: no tokens given");
  if (pos != n_cached_)
    return make_error("forward: pos ", pos, " must equal the number of cached positions (", n_cached_, ")");
  if (pos + int64_t(tokens.size()) > max_context_)
    return make_error("forward: positions up to ", pos + tokens.size(), " exceed the context length ", max_context_);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.n_vocab)
      return make_error("forward: token ", tokens[i], " at index ", i, " is outside the vocabulary [0, ",
                        config_.n_vocab, ")");
  return {};
}

void CudaBackend::set_state(int32_t token, int pos, int n_tokens, const SamplingParams& sampling, uint64_t first_draw) {
  StepState s{};
  s.temperature = sampling.greedy() ? 0.f : sampling.temperature;
  s.min_p = sampling.min_p;
  s.top_k = sampling.top_k >= config_.n_vocab ? 0 : sampling.top_k;  // k >= the vocabulary keeps all (host rule)
  s.top_p = sampling.top_p;
  s.seed = sampling.seed;
  s.draw = first_draw;
  s.token = token;
  s.pos = pos;
  s.seq_len = pos + n_tokens;
  s.cu_seqlens_q[0] = 0;
  s.cu_seqlens_q[1] = n_tokens;
  s.n_generated = 0;
  s.argmax = 0;
  decode_pos_ = pos;
  // Pageable source: the copy is staged before the call returns, so `s` may go out of scope.
  CUDA_CHECK(cudaMemcpyAsync(state_, &s, sizeof(s), cudaMemcpyHostToDevice, stream_));
}

Status CudaBackend::enqueue_forward(std::span<const int32_t> tokens, int pos) {
  MK_TRY(check_step(tokens, pos));
  last_forward_prefill_ = tokens.size() > 1;
  if (tokens.size() == 1) {
    set_state(tokens[0], pos, 1);
    begin_step();
    MK_TRY(ensure_graph());
    replay_decode();
  } else {
    MK_TRY(enqueue_prefill_only(tokens, pos));
  }
  return {};
}

Status CudaBackend::forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) {
  if (logits.size() != size_t(config_.n_vocab))
    return make_error("forward: logits has ", logits.size(), " elements, expected n_vocab = ", config_.n_vocab);
  MK_TRY(enqueue_forward(tokens, pos));
  CUDA_CHECK(cudaMemcpyAsync(logits.data(), logits_, logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "running the forward pass"));
  n_cached_ = pos + int(tokens.size());
  return {};
}

Status CudaBackend::forward_on_device(std::span<const int32_t> tokens, int pos) {
  MK_TRY(enqueue_forward(tokens, pos));
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "running the forward pass"));
  n_cached_ = pos + int(tokens.size());
  return {};
}

Status CudaBackend::enqueue_prefill_only(std::span<const int32_t> tokens, int pos) {
  MK_TRY(check_step(tokens, pos));
  for (size_t done = 0; done < tokens.size();) {
    int n = int(std::min<size_t>(size_t(opt_.prefill_chunk), tokens.size() - done));
    CUDA_CHECK(cudaMemcpyAsync(tokens_, tokens.data() + done, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
    set_state(0, pos + int(done), n);
    done += size_t(n);
    MK_TRY(run_prefill_chunk(n, done == tokens.size()));
  }
  n_cached_ = pos + int(tokens.size());
  return {};
}

void CudaBackend::truncate(int pos) { n_cached_ = std::clamp(pos, 0, n_cached_); }

bool CudaBackend::can_decode_sample(const SamplingParams& p) const {
  // The finish kernel's draw (ops/sample.cuh): temperature, top-k, top-p and min-p; a repetition penalty stays on the
  // host.
  const bool selects = (p.top_k > 0 && p.top_k < config_.n_vocab) || p.top_p < 1.f;
  return !p.greedy() && p.repetition_penalty == 1.f && sampling_params_error(p)[0] == '\0' &&
         (!selects || config_.n_vocab <= SAMPLE_SELECT_MAX_VOCAB);
}

Status CudaBackend::decode_on_device(int32_t token, int pos, const SamplingParams& sampling, uint64_t first_draw,
                                     std::span<int32_t> out) {
  int32_t t[1] = {token};
  MK_TRY(check_step(t, pos));
  if (pos + int64_t(out.size()) > max_context_)
    return make_error("generate: ", out.size(), " tokens from position ", pos, " exceed the context length ",
                      max_context_);
  if (out.empty()) return {};
  MK_TRY(ensure_graph());  // may run one eager step: do it before setting the state
  set_state(token, pos, 1, sampling, first_draw);
  begin_step();
  const size_t k = size_t(decode_steps_per_replay());
  size_t i = 0;
  for (; i + k <= out.size(); i += k) replay_decode_k();
  for (; i < out.size(); ++i) replay_decode();
  CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens_out_, out.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "running greedy decode"));
  n_cached_ = pos + int(out.size());
  return {};
}

Status CudaBackend::set_random_context(int n) {
  if (n < 0 || n >= max_context_) return make_error("set_random_context: ", n, " is outside [0, ", max_context_, ")");
  kv_.fill_random(12345, stream_);
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "filling the KV cache"));
  n_cached_ = n;
  return {};
}

Status CudaBackend::set_cached(int n) {
  if (n < 0 || n > max_context_) return make_error("set_cached: ", n, " is outside [0, ", max_context_, "]");
  n_cached_ = n;
  return {};
}

Status CudaBackend::begin_decode(int32_t token, int pos, const SamplingParams& sampling) {
  int32_t t[1] = {token};
  MK_TRY(check_step(t, pos));
  MK_TRY(ensure_graph());
  set_state(token, pos, 1, sampling);
  begin_step();
  return {};
}

Expected<int32_t> CudaBackend::sample_last(const SamplingParams& p, uint64_t draw) {
  if (!p.argmax_only()) return sample_logits(logits_, p, draw);
  // The forward's own argmax (lowest id on ties, as decode_greedy_until): a prefill leaves the LM head's packed
  // maximum, a 1-token step its finish kernel's choice (which also clears the packed one).
  StepState s{};
  CUDA_CHECK(cudaMemcpyAsync(&s, state_, sizeof(s), cudaMemcpyDeviceToHost, stream_));
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "sample_last: reading the argmax"));
  const int32_t id = last_forward_prefill_ ? argmax_unpack(s.argmax) : s.token;
  if (id < 0 || id >= config_.n_vocab)
    return make_error("sample_last: the device's argmax is ", id, ", expected an id in [0, ", config_.n_vocab,
                      ") (no forward since the backend was made?)");
  return id;
}

Expected<int32_t> CudaBackend::sample_logits(const float* logits, const SamplingParams& p, uint64_t draw) {
  if (!can_decode_sample(p))
    return make_error("sample_last: the device draws with a temperature, top-k, top-p and min-p only (no "
                      "repetition penalty, valid parameters), got temperature ", p.temperature, ", top_k ", p.top_k,
                      ", top_p ", p.top_p, ", min_p ", p.min_p, ", repetition_penalty ", p.repetition_penalty);
  // The finish kernel's rule (set_state): top_k >= the vocabulary keeps all.
  const SampleRule rule{p.temperature, p.top_k >= config_.n_vocab ? 0 : p.top_k, p.top_p, p.min_p};
  // The scratch is the finish kernel's: both run on stream_, one after the other, and each leaves it zero.
  sample_token(Stream(stream_, false), logits, config_.n_vocab, rule, p.seed, draw, drawn_, opt_.sample_blocks,
               sample_scratch_);
  return drawn_token(stream_, drawn_, config_.n_vocab, "sample_last");
}

}  // namespace cuda

Expected<std::unique_ptr<Backend>> make_cuda_backend(const Model& model, int max_context) {
  auto dev = cuda::query_device();
  if (!dev) return dev.error();
  if (max_context <= 0) max_context = std::min(model.config.max_position > 0 ? model.config.max_position : 8192, 8192);
  size_t need = cuda::device_weight_bytes(model.config) + cuda::DeviceKvCache::bytes_for(model.config, max_context);
  if (need > dev->free_memory)
    return make_error("the model needs ", need >> 20, " MiB of GPU memory (weights + KV cache for ", max_context,
                      " positions) but GPU '", dev->name, "' has ", dev->free_memory >> 20, " MiB free");
  // Rope-pair row order: RoPE and the K/V write run in the QKV matvec's epilogue (one kernel per layer fewer; Qwen3's
  // q/k norm too, MatvecOut::ROPE_QKV_NORM). H200, 1B decode: 0.850 vs 0.868 ms/token with the RoPE kernel in one run
  // (bench/RESULTS.md, layered round 6), 0.846 vs 0.862 in round 5.
  auto w = cuda::upload_weights(model.config, model.weights, /*rope_pair_rows=*/true);
  if (!w) return w.error();
  auto b = cuda::CudaBackend::create(model.config, std::move(*w), max_context);
  if (!b) return b.error();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace mk
