// The kernels one step enqueues (see cuda_backend.h): the decode step (captured as a CUDA graph) and a prefill
// chunk. Shapes: E = n_embd, F = n_ff, Q = q_dim, KV = kv_dim, V = n_vocab, T = tokens in the chunk.
#include <algorithm>
#include <cmath>

// cuda/attention/ (split-KV decode, FA2-style prefill) is linked: use it unless the options say otherwise.
#define MK_ATTENTION_LIB 1

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/decode_stop.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.cuh"
#include "cuda/ops/attention_simple.h"
#include "cuda/ops/embed.h"
#include "cuda/ops/matvec.h"
#include "cuda/ops/rmsnorm.h"
#include "cuda/ops/rope.h"
#include "cuda/ops/sample.cuh"
#include "cuda/ops/swiglu.h"

namespace mk::cuda {
namespace {

// Ends a decode step: the argmax (or, with a temperature, a draw from the logits: StepState) becomes the next input
// token and is logged; the position advances; the token's embedding row goes into x (the next step's first kernel
// reads it, so a step needs no embedding kernel: one kernel boundary less) and the argmax word is reset for the next
// step's LM head. x: [n_embd] f32; tok_embd: [n_vocab, n_embd] bf16; logits: [n_vocab] f32. The whole block calls it
// with the same `drawn` (the draw, when temperature > 0).
// With a stop check (graphs of decode_*_until, decode_stop.h): the token is compared with the call's stop ids and
// the step's WHILE conditions are set (stop_after_token).
__device__ __forceinline__ void finish_step(StepState* st, int32_t* tokens_out, int capacity, float* x,
                                            const bf16* tok_embd, int n_embd, float temperature, int32_t drawn,
                                            const StopCheck& stop, const StopShared& s_stop) {
  __shared__ int32_t s_tok;
  if (threadIdx.x == 0) {
    const int32_t tok = temperature > 0.f ? drawn : argmax_unpack(st->argmax);
    if (temperature > 0.f) st->draw += 1;
    s_tok = tok;
    st->token = tok;
    st->argmax = 0ull;
    const int32_t n = st->n_generated;
    if (n < capacity) tokens_out[n] = tok;
    st->n_generated = n + 1;
    st->pos += 1;
    st->seq_len += 1;
    stop_after_token(stop, s_stop, tok, n + 1);
  }
  __syncthreads();
  const bf16* row = tok_embd + size_t(s_tok) * size_t(n_embd);  // argmax of n_vocab logits: always in range
  for (int c = threadIdx.x; c < n_embd / 8; c += blockDim.x) {
    float f[8];
    unpack8(*reinterpret_cast<const uint4*>(row + c * 8), f);
    reinterpret_cast<float4*>(x + c * 8)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(x + c * 8)[1] = make_float4(f[4], f[5], f[6], f[7]);
  }
}

// One block (CudaBackendOptions::sample_blocks = 1): block_sample draws.
__global__ void __launch_bounds__(1024) finish_step_kernel(StepState* st, int32_t* tokens_out, int capacity, float* x,
                                                           const bf16* tok_embd, int n_embd, const float* logits,
                                                           int n_vocab, StopCheck stop) {
  __shared__ StopShared s_stop;
  stop_preload(stop, s_stop);
  pdl_wait();
  pdl_launch_dependents();
  const float temperature = st->temperature;
  int32_t drawn = 0;
  if (temperature > 0.f) {  // uniform over the block
    drawn = block_sample(logits, n_vocab, SampleRule{temperature, st->top_k, st->top_p, st->min_p}, st->seed, st->draw);
    if (drawn < 0) drawn = 0;  // no finite logit: as the argmax of such logits, a valid row (the result is garbage)
  }
  finish_step(st, tokens_out, capacity, x, tok_embd, n_embd, temperature, drawn, stop, s_stop);
}

// Several blocks (sample_blocks > 1, the default): they draw together (grid_sample) and the block that
// finishes the draw ends the step; with temperature 0 block 0 alone does.
__global__ void __launch_bounds__(1024) finish_step_grid_kernel(StepState* st, int32_t* tokens_out, int capacity,
                                                                float* x, const bf16* tok_embd, int n_embd,
                                                                const float* logits, int n_vocab, GridSampleScratch sc,
                                                                StopCheck stop) {
  __shared__ StopShared s_stop;
  stop_preload(stop, s_stop);  // every block: the one that ends the step is known only after the draw
  pdl_wait();
  pdl_launch_dependents();
  const float temperature = st->temperature;
  int32_t drawn = 0;
  if (temperature > 0.f) {  // uniform over the grid
    drawn = grid_sample(logits, n_vocab, SampleRule{temperature, st->top_k, st->top_p, st->min_p}, st->seed, st->draw,
                        &st->argmax, sc);
    if (drawn == GRID_SAMPLE_OTHER) return stop_prefetch_share(stop);
    if (drawn < 0) drawn = 0;
  } else if (blockIdx.x != 0) {
    return stop_prefetch_share(stop);
  }
  finish_step(st, tokens_out, capacity, x, tok_embd, n_embd, temperature, drawn, stop, s_stop);
  stop_prefetch_share(stop);  // after the step's work: the next step waits for this block, not for the L2
}

// What `enqueue` puts on `stream`, captured, instantiated and uploaded (so that its first replay costs no more than
// the next). Relaxed mode: the first launch of a kernel variant sets its attributes, which is not a stream operation.
template <class Enqueue>
Status capture_graph(cudaStream_t stream, const char* what, cudaGraphExec_t* out, Enqueue&& enqueue) {
  MK_TRY(cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cat("capturing ", what).c_str()));
  enqueue();
  cudaGraph_t g = nullptr;
  MK_TRY(cuda_status(cudaStreamEndCapture(stream, &g), cat("capturing ", what).c_str()));
  const cudaError_t err = cudaGraphInstantiate(out, g, 0);
  cudaGraphDestroy(g);
  MK_TRY(cuda_status(err, cat("instantiating ", what).c_str()));
  return cuda_status(cudaGraphUpload(*out, stream), cat("uploading ", what).c_str());
}

}  // namespace

#ifdef MK_ATTENTION_LIB
bool attention_lib_available() { return true; }
#else
bool attention_lib_available() { return false; }
#endif

void CudaBackend::attend_decode(const Stream& s, int layer, int n_split) {
#ifdef MK_ATTENTION_LIB
  if (n_split > 0) {
    AttentionDecodeArgs a;
    a.q = q_;
    a.out = attn_;
    a.seq_lens_k = &state_->seq_len;
    a.kv = kv_.layer(layer);
    a.block_table = kv_.block_table();
    a.batch = 1;
    a.n_head = config_.n_head;
    a.max_seqlen_k = kv_.capacity();
    a.workspace = attn_ws_;
    a.workspace_bytes = attn_ws_bytes_;
    AttentionOptions opt;
    opt.decode_early_kv = opt_.attn_early_kv;  // the contract: see CudaBackendOptions::attn_early_kv
    opt.decode_splits = n_split;
    if (rope_in_attn_) {
      const DeviceLayer& w = weights_.layers[size_t(layer)];
      a.rope = {.qkv = qkv_, .pair_rows = weights_.rope_pair_rows, .bias = w.bqkv, .q_norm = w.q_norm,
                .k_norm = w.k_norm, .eps = config_.rms_norm_eps, .inv_freq = inv_freq_};
      a.q = nullptr;
    }
    Status st = attention_decode(s.stream, a, opt);
    MK_CHECK(st.ok());
    return;
  }
#endif
  attention_simple(s, attn_, q_, kv_.layer(layer), kv_.block_table_data(), &state_->seq_len, 1, config_.n_head, 0.f);
}

void CudaBackend::attend_prefill(const Stream& s, int layer, int n_tokens) {
#ifdef MK_ATTENTION_LIB
  if (opt_.attention_lib) {
    AttentionPrefillArgs a;
    a.q = pq_;
    a.out = pattn_;
    a.cu_seqlens_q = state_->cu_seqlens_q;
    a.seq_lens_k = &state_->seq_len;
    a.kv = kv_.layer(layer);
    a.block_table = kv_.block_table();
    a.batch = 1;
    a.total_q = n_tokens;
    a.max_seqlen_q = n_tokens;
    a.max_seqlen_k = kv_.capacity();
    a.n_head = config_.n_head;
    Status st = attention_prefill(s.stream, a);
    MK_CHECK(st.ok());
    return;
  }
#endif
  attention_simple(s, pattn_, pq_, kv_.layer(layer), kv_.block_table_data(), &state_->seq_len, n_tokens,
                   config_.n_head, 0.f);
}

MatvecArgs CudaBackend::lm_head_args(const float* x) const {  // logits[V] = Wlm rmsnorm(x), argmax into state
  return {.w = weights_.lm_head, .n_rows = config_.n_vocab, .n_cols = config_.n_embd, .x = x,
          .norm_w = weights_.final_norm, .eps = config_.rms_norm_eps, .out = logits_, .argmax = &state_->argmax};
}

void CudaBackend::enqueue_decode(const Stream& s, int n_split, const StopCheck& stop) {
  const ModelConfig& c = config_;
  const int E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim();
  auto keep = [&](LeaveOut k) { return !(opt_.leave_out & k); };
  // x_ holds the embedding of state_->token and state_->argmax is 0 (begin_step, or the previous step's finish).
  for (int l = 0; l < c.n_layer; ++l) {
    const DeviceLayer& w = weights_.layers[size_t(l)];
    // qkv[Q + 2KV] = Wqkv rmsnorm(x) (+ bias)
    MatvecArgs qkv{.w = w.wqkv, .n_rows = Q + 2 * KV, .n_cols = E, .x = x_, .norm_w = w.attn_norm,
                   .eps = c.rms_norm_eps, .out = qkv_, .trigger_at_start = opt_.early_trigger && l > 0};
    if (rope_in_attn_) {  // raw q | k | v; the decode attention applies bias, q/k norm and RoPE (attend_decode)
      if (keep(LEAVE_QKV)) matvec(s, qkv);
    } else if (weights_.rope_pair_rows) {
      // Fused: (Qwen3: the q/k norm, then) RoPE in the epilogue, q -> q_ (bf16), k and v -> the cache; no separate
      // kernel.
      qkv.bias = w.bqkv;
      qkv.mode = w.q_norm ? MatvecOut::ROPE_QKV_NORM : MatvecOut::ROPE_QKV;
      qkv.rope.q_norm = w.q_norm;
      qkv.rope.k_norm = w.k_norm;
      qkv.rope.eps = c.rms_norm_eps;
      qkv.rope.inv_freq = inv_freq_;
      qkv.rope.pos = &state_->pos;
      qkv.rope.head_dim = c.head_dim;
      qkv.rope.n_head = c.n_head;
      qkv.rope.n_kv_head = c.n_kv_head;
      qkv.rope.q_out = q_;
      qkv.rope.kv = kv_.layer(l);
      qkv.rope.block_table = kv_.block_table_data();
      qkv.rope.max_positions = kv_.capacity();
      if (keep(LEAVE_QKV)) matvec(s, qkv);
    } else if (keep(LEAVE_QKV)) {
      matvec(s, qkv);
      rope_qkv(s, rope_args(l, qkv_, q_, 1));  // bias, q/k norm, RoPE: q[Q] bf16, K/V rows of this position into the cache
    }

    if (keep(LEAVE_ATTN)) attend_decode(s, l, n_split);  // attn[Q] bf16

    // x += Wo attn (add_early: x_ was last written by the previous layer's down projection, or the embedding)
    if (keep(LEAVE_O))
      matvec(s, {.w = w.wo, .n_rows = E, .n_cols = Q, .x_bf16 = attn_, .out = x_, .mode = MatvecOut::ADD,
                 .add_early = opt_.add_early, .trigger_at_start = opt_.early_trigger});
    // h[F] = silu(Wg n) * (Wu n), n = rmsnorm(x); in bf16 (h_bf16 option): every block of the down projection
    // stages all of h, so its L2 traffic halves
    if (keep(LEAVE_GATE_UP))
      matvec(s, {.w = w.w_gate_up, .n_rows = 2 * F, .n_cols = E, .x = x_, .norm_w = w.mlp_norm,
                 .eps = c.rms_norm_eps, .out = opt_.h_bf16 ? nullptr : h_,
                 .out_bf16 = opt_.h_bf16 ? hb_ : nullptr, .mode = MatvecOut::SWIGLU});
    // x += Wd h (add_early: x_ was last written by the O projection, two kernels back)
    if (keep(LEAVE_DOWN))
      matvec(s, {.w = w.w_down, .n_rows = E, .n_cols = F, .x = opt_.h_bf16 ? nullptr : h_,
                 .x_bf16 = opt_.h_bf16 ? hb_ : nullptr, .out = x_, .mode = MatvecOut::ADD,
                 .add_early = opt_.add_early, .trigger_at_start = opt_.early_trigger});
  }
  matvec(s, lm_head_args(x_));
  const float* logits = logits_;
  if (opt_.sample_blocks > 1)
    launch(s, dim3(unsigned(opt_.sample_blocks)), dim3(1024), 0, finish_step_grid_kernel, state_, tokens_out_,
           max_context_, x_, weights_.tok_embd, E, logits, c.n_vocab, sample_scratch_, stop);
  else
    launch(s, dim3(1), dim3(1024), 0, finish_step_kernel, state_, tokens_out_, max_context_, x_, weights_.tok_embd, E,
           logits, c.n_vocab, stop);
}

void CudaBackend::begin_step() {
  embed(Stream(stream_, false), x_, weights_.tok_embd, &state_->token, 1, config_.n_embd, config_.n_vocab,
        &state_->argmax);
}

void CudaBackend::enqueue_prefill_chunk(const Stream& s, int T, bool logits) {
  const ModelConfig& c = config_;
  const int E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim();
  embed(s, px_, weights_.tok_embd, tokens_, T, E, c.n_vocab, &state_->argmax);
  for (int l = 0; l < c.n_layer; ++l) {
    const DeviceLayer& w = weights_.layers[size_t(l)];
    rmsnorm(s, pxn_, px_, w.attn_norm, c.rms_norm_eps, E, T, E);
    gemm_->run(s.stream, pqkv_, DType::F32, pxn_, w.wqkv, T, Q + 2 * KV, E);
    rope_qkv(s, rope_args(l, pqkv_, pq_, T));
    attend_prefill(s, l, T);
    gemm_->run(s.stream, px_, DType::F32, pattn_, w.wo, T, E, Q, 1.f);  // x += attn Wo^T
    rmsnorm(s, pxn_, px_, w.mlp_norm, c.rms_norm_eps, E, T, E);
    gemm_->run(s.stream, pgu_, DType::F32, pxn_, w.w_gate_up, T, 2 * F, E);
    swiglu(s, ph_, pgu_, F, T);
    gemm_->run(s.stream, px_, DType::F32, ph_, w.w_down, T, E, F, 1.f);  // x += h Wd^T
  }
  if (!logits) return;
  matvec(s, lm_head_args(px_ + size_t(T - 1) * size_t(E)));  // logits of the last token only
}

Status CudaBackend::run_prefill_chunk(int T, bool logits) {
  const Stream s(stream_, opt_.pdl);
  if (opt_.prefill_graphs <= 0) {
    enqueue_prefill_chunk(s, T, logits);
    return {};
  }
  auto it = std::find_if(prefill_graphs_.begin(), prefill_graphs_.end(),
                         [&](const PrefillGraph& g) { return g.n_tokens == T && g.logits == logits; });
  if (it == prefill_graphs_.end()) {
    // Remembered lengths (with or without a graph): at most 4 x prefill_graphs, the least recently used dropped.
    if (prefill_graphs_.size() >= size_t(4 * opt_.prefill_graphs)) {
      auto old = std::min_element(prefill_graphs_.begin(), prefill_graphs_.end(),
                                  [](const PrefillGraph& a, const PrefillGraph& b) { return a.last_use < b.last_use; });
      if (old->exec) {
        MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "retiring a prefill graph"));  // none of its launches left
        cudaGraphExecDestroy(old->exec);
      }
      prefill_graphs_.erase(old);
    }
    prefill_graphs_.push_back({T, logits});
    it = prefill_graphs_.end() - 1;
  }
  PrefillGraph& g = *it;
  g.uses += 1;
  g.last_use = ++prefill_clock_;
  const int at = std::max(1, opt_.prefill_graph_at);
  if (!g.exec && at == 1) MK_TRY(capture_prefill(T, logits, &g.exec));  // before running: this chunk waits for it
  if (g.exec) {
    CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  } else {
    enqueue_prefill_chunk(s, T, logits);
    // The next use replays a graph (also a length whose graph was retired): capture it now, while the GPU runs the
    // chunk just enqueued.
    if (g.uses + 1 >= at) MK_TRY(capture_prefill(T, logits, &g.exec));
  }
  // Graphs kept: at most prefill_graphs, the least recently used loses its graph (its length is still remembered).
  size_t n_exec = 0;
  for (const PrefillGraph& p : prefill_graphs_) n_exec += p.exec ? 1 : 0;
  if (n_exec > size_t(opt_.prefill_graphs))  // none of the retired graph's launches left (this chunk's included)
    MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "retiring a prefill graph"));
  while (n_exec > size_t(opt_.prefill_graphs)) {
    PrefillGraph* old = nullptr;
    for (PrefillGraph& p : prefill_graphs_)
      if (p.exec && (!old || p.last_use < old->last_use)) old = &p;
    cudaGraphExecDestroy(old->exec);
    old->exec = nullptr;
    --n_exec;
  }
  return {};
}

Status CudaBackend::capture_prefill(int T, bool logits, cudaGraphExec_t* out) {
  return capture_graph(stream_, "a prefill graph", out,
                       [&] { enqueue_prefill_chunk(Stream(stream_, opt_.pdl), T, logits); });
}

Status CudaBackend::ensure_graph() {
  if (!opt_.graph || graphs_.front().one) return {};
  for (DecodeGraph& g : graphs_) {
    MK_TRY(capture_steps(1, g.n_split, &g.one));
    if (decode_steps_per_replay() > 1) MK_TRY(capture_steps(decode_steps_per_replay(), g.n_split, &g.k));
  }
  return {};
}

Status CudaBackend::capture_steps(int n_steps, int n_split, cudaGraphExec_t* out) {
  return capture_graph(stream_, "the decode graph", out, [&] {
    for (int i = 0; i < n_steps; ++i) enqueue_decode(Stream(stream_, opt_.pdl), n_split);
  });
}

// Any variant is correct for any sequence (the decode kernel splits the actual length); the choice is speed only.
const CudaBackend::DecodeGraph& CudaBackend::variant_for(int seq_len) const {
  for (const DecodeGraph& g : graphs_)
    if (seq_len <= g.max_seq_len) return g;
  return graphs_.back();
}

int CudaBackend::decode_attention_splits(int seq_len) const { return variant_for(seq_len).n_split; }

void CudaBackend::replay_decode() {
  const DecodeGraph& g = variant_for(decode_pos_ + 1);
  if (g.one) CUDA_CHECK(cudaGraphLaunch(g.one, stream_));
  else enqueue_decode(Stream(stream_, opt_.pdl), g.n_split);
  decode_pos_ += 1;
}

void CudaBackend::replay_decode_k() {
  const int k = decode_steps_per_replay();
  const DecodeGraph& g = variant_for(decode_pos_ + k);  // the last step's sequence
  if (g.k) {
    CUDA_CHECK(cudaGraphLaunch(g.k, stream_));
    decode_pos_ += k;
  } else {
    for (int i = 0; i < k; ++i) replay_decode();
  }
}

RopeQkvArgs CudaBackend::rope_args(int layer, const float* qkv, __nv_bfloat16* q_out, int n_tokens) const {
  const ModelConfig& c = config_;
  const DeviceLayer& w = weights_.layers[size_t(layer)];
  RopeQkvArgs r;
  r.qkv = qkv;
  r.pair_rows = weights_.rope_pair_rows;
  r.bias = w.bqkv;
  r.q_norm = w.q_norm;
  r.k_norm = w.k_norm;
  r.eps = c.rms_norm_eps;
  r.inv_freq = inv_freq_;
  r.pos0 = &state_->pos;
  r.n_tokens = n_tokens;
  r.n_head = c.n_head;
  r.n_kv_head = c.n_kv_head;
  r.head_dim = c.head_dim;
  r.q_out = q_out;
  r.kv = kv_.layer(layer);
  r.block_table = kv_.block_table_data();
  r.max_positions = kv_.capacity();
  return r;
}

}  // namespace mk::cuda
