// CudaBackend: the layered GPU path. One kernel per operation (src/cuda/ops/), weights uploaded once in bf16
// (device_weights.h), a paged KV cache on the device (kv_cache.h), prefill through cuBLASLt GEMMs, and the
// decode step captured as CUDA graphs (one per sequence-length variant, see DecodeGraph) whose kernels chain with
// programmatic dependent launch. A decode graph reads its token and position from device memory and writes the
// argmax token back, so greedy generation replays it with no host work between steps (decode_greedy). A prefill chunk
// whose length recurs is replayed from a graph too (prefill_graphs).
// Tests: tests/gpu/test_backend.cu, test_backend_decode_variants.cu, test_backend_prefill.cu. Benchmark: `megakernel bench` (cmd_bench.cpp).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "cuda/backend/decode_stop.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/kv_cache.h"
#include "cuda/common/launch.h"
#include "cuda/ops/sample.h"
#include "cuda/ops/gemm.h"
#include "cuda/ops/rope.h"
#include "megakernel/model.h"
#include "runtime/backend.h"

namespace mk {

// Checks the GPU (present, sm_90, memory), uploads the model's weights and allocates the KV cache.
// max_context <= 0: the model's max_position capped at 8192. Errors name what is missing.
Expected<std::unique_ptr<Backend>> make_cuda_backend(const Model& model, int max_context);

namespace cuda {

struct MatvecArgs;  // cuda/ops/matvec.h

struct CudaBackendOptions {
  bool pdl = true;           // programmatic dependent launch between kernels
  bool graph = true;         // replay the decode step as a CUDA graph
  bool attention_lib = true; // cuda/attention kernels when linked, else ops/attention_simple
  int prefill_chunk = 1024;  // tokens per prefill pass
  // Prefill: a chunk's ~160 kernels replayed from a CUDA graph per (chunk length, logits or not) instead of launched
  // one by one; at most this many graphs are kept (the least recently used is dropped). 0: eager launches. A length's
  // graph serves its prefill_graph_at-th chunk on: 1 captures it before the first chunk runs; n > 1 captures it right
  // after the (n-1)-th chunk's eager launch, while the GPU runs that chunk. The graph reads the tokens, position and
  // lengths from device memory (StepState), so one graph serves its length at every position. Same kernels, same
  // arguments: the same bits as eager launches (tests/gpu/test_backend_prefill.cu).
  // H200 (bench/RESULTS.md, session 11): a replay saves ~0.11 ms per chunk on 1B at any length (2 tokens 1.23 -> 1.13
  // ms, 1024 tokens 4.35 -> 4.23) and ~0.2 ms on 8B (5.21 -> 5.00), but a capture costs ~1-1.6 ms of host time, more
  // than a short 1B chunk's GPU time, so the chunk it follows ends that much later (a 2-token first token 1.6 -> 2.9-3.8
  // ms when it was captured after the warm-up's 2-token prefill). 4: a length's first three chunks (the start-up
  // warm-up's 2-token prefill and every prompt of a one-shot `generate` among them) run eagerly at eager cost; a
  // length that recurs pays one capture and then replays. Measurement overrides: MK_PREFILL_GRAPHS,
  // MK_PREFILL_GRAPH_AT (read at creation).
  int prefill_graphs = 16;
  int prefill_graph_at = 4;
  // Decode steps per graph launch for decode_greedy and replay_decode_k (the steps chain with PDL inside the
  // graph, so a step's first kernel overlaps the previous step's last instead of waiting for a graph boundary).
  // H200 1B, 8 steps (bench/RESULTS.md): 0.836 / 0.828 ms/token vs 0.840 / 0.831 (round 6); with the early matvec
  // triggers 0.7414 / 0.7410 vs 0.7546 / 0.7470 (session 7 final round), hence 8.
  int graph_steps = 8;
  // Decode steps per body of the WHILE loop that runs a call with stop ids (decode_*_until, decode_stop.h): a body's
  // steps chain with PDL, the loop checks the stop after each body, so a stop id leaves at most S - 1 steps running
  // and each body boundary costs ~9 us (no PDL overlap across it). H200 1B, 128-token calls (bench/RESULTS.md, session
  // 10): +1.38% / +0.60% / +0.25% / 0.00% per token for S = 1 / 2 / 4 / 8 against the same calls without stop ids.
  // 2: at most one step after a stop, the least expected cost for replies up to ~400 tokens.
  int stop_graph_steps = 2;
  // With stop ids: the finish kernel of a WHILE body's last step asks the L2 for layer 0's QKV weights, which the next
  // body's first kernel reads after the boundary (decode_stop.cuh stop_prefetch_share; the grid finish kernel only).
  // H200 1B (bench/RESULTS.md, session 10 call 2): S = 2 +0.50% vs +0.75% per token without, S = 1 +1.00% vs +1.10%.
  bool stop_prefetch = true;
  // Decode: the O and down projections read their residual rows before the PDL wait (MatvecArgs::add_early; safe
  // because the kernel before each (attention, gate/up) does not write x and triggers its dependents after its wait).
  // Bitwise the same results; H200 1B: 0.836 / 0.825 ms/token (median / back-to-back) vs 0.840 / 0.831 without.
  bool add_early = true;
  // Decode: the QKV (layers after the first), O and down projections let the next kernel launch as soon as their own
  // weight loads are out (MatvecArgs::trigger_at_start). Safe here: the kernels after them (attention, gate/up, the
  // next QKV or the LM head) read only weights, norm weights and K/V rows of earlier steps before their wait, and the
  // kernels whose early reads need a finished writer (O and down with add_early, attention with attn_early_kv) follow
  // a kernel that still triggers after its wait (attention, gate/up; layer 0's QKV after the previous step's end).
  // H200 (bench/RESULTS.md, session 7): 1B 0.7511 / 0.7495 ms/token (median / back-to-back) vs 0.7593 / 0.7654; 8B
  // 3.848 vs 3.844 (+0.1%).
  bool early_trigger = true;
  // Decode with a temperature: blocks of the finish kernel that draw the token (ops/sample.cuh). 1: block_sample
  // (one block: ~0.1 ms per token at the Llama 3 vocabulary); more: grid_sample over that many blocks (at most
  // 1024 and the GPU's SM count: with top-k / top-p the blocks wait for each other). H200, 1B (bench/RESULTS.md session 8): 1 block 0.8305 ms/token, 64 blocks 0.7489, 132 blocks 0.7559;
  // greedy 0.7350.
  int sample_blocks = 64;
  // Decode: cuda/attention's decode streams the K/V rows below the newest before its PDL wait
  // (AttentionOptions::decode_early_kv). Its contract holds here: the kernel before it (the QKV matvec with the RoPE
  // epilogue, or the RoPE kernel; the plain QKV matvec under rope_in_attention, with the newest row written by the
  // attention itself) writes only q (or the raw projections) and the newest K/V row, and the kernels that wrote the
  // older rows and seq_len (earlier steps) have completed when attention starts (see early_trigger).
  bool attn_early_kv = true;
  // Decode: the QKV matvec stores the raw projections and the decode attention applies bias, q/k norm and RoPE and
  // writes the newest K/V row itself (AttentionDecodeArgs::rope), instead of the matvec's RoPE epilogue. -1: for
  // models with a q/k norm whose heads fit the kernel's shared memory (attention_decode_rope_fits; Qwen3: the epilogue
  // needs a whole head's sum of squares, which takes clusters of 8 blocks per head in the matvec; an attention CTA
  // owns whole heads), 0 off, 1 every model. Needs the attention library (head dims 64, 128).
  int rope_in_attention = -1;
  // Decode: the SwiGLU output h goes to the down projection in bf16 (as in a bf16 transformers model) instead of
  // f32: each of the down projection's blocks stages all of h from L2.
  bool h_bf16 = true;
  // Measurement only (`megakernel bench --variants skip-attn`, ...): kernels left out of the decode step, to read
  // each kernel's marginal cost in the chain. The results are garbage; never set outside a benchmark.
  unsigned leave_out = 0;  // LeaveOut bits
};
enum LeaveOut : unsigned { LEAVE_QKV = 1, LEAVE_ATTN = 2, LEAVE_O = 4, LEAVE_GATE_UP = 8, LEAVE_DOWN = 16 };

// Whether the kernels of cuda/attention/ are linked into this build (else ops/attention_simple is used).
bool attention_lib_available();

// Device-side state of a step (read by the graph's kernels, so it lives at a fixed address).
struct StepState {
  int32_t token;             // decode input token
  int32_t pos;               // position of the step's first token
  int32_t seq_len;           // cached positions once the step's tokens are appended (pos + n_tokens)
  int32_t cu_seqlens_q[2];   // {0, n_tokens}
  int32_t n_generated;       // tokens written to tokens_out by the decode graph
  unsigned long long argmax; // packed argmax of the logits (see ops/matvec.h)
  // Decode's next token: the argmax when temperature is 0, else drawn on the device (ops/sample.cuh: temperature,
  // top-k, top-p, min-p, the host Sampler's rule) with draw index `draw`, which each step advances.
  float temperature;
  float min_p;
  int32_t top_k;  // 0: off
  float top_p;    // 1: off
  unsigned long long seed;
  unsigned long long draw;
};

class CudaBackend final : public Backend {
 public:
  // shared_kv: use that cache (same configuration, at least max_context positions; it must outlive the backend)
  // instead of allocating one: another backend of the same model writes it too (the megakernel's layered prefill).
  static Expected<std::unique_ptr<CudaBackend>> create(const ModelConfig& config, DeviceWeights weights,
                                                       int max_context, const CudaBackendOptions& opt = {},
                                                       const DeviceKvCache* shared_kv = nullptr);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  Status forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) override;
  Status forward_on_device(std::span<const int32_t> tokens, int pos) override;  // no copy of the logits to the host
  void truncate(int pos) override;
  int max_context() const override { return max_context_; }
  const ModelConfig& config() const override { return config_; }
  // The next token chosen on the device from the last forward's logits (Backend::sample_last): the finish kernel's
  // draw (ops/sample.h sample_token over sample_blocks blocks, this backend's scratch) for what can_decode_sample
  // accepts; greedy: the argmax the forward already found (a prefill's LM head's fused argmax, a 1-token step's choice).
  Expected<int32_t> sample_last(const SamplingParams& p, uint64_t draw) override;
  // The same draw from other logits ([n_vocab] f32 on the device, written before the call: the draw runs on this
  // backend's stream), e.g. the megakernel backend's own after its 1-token forward.
  Expected<int32_t> sample_logits(const float* logits, const SamplingParams& p, uint64_t draw);

  // Greedy and sampled decode on the device (Backend::decode_greedy_until / decode_sample_until): feeds `token` at
  // `pos`, then each chosen token back in; sampling with a temperature, top-k, top-p, min-p (can_decode_sample).
  // Stop ids (decode_stop.h) with CUDA graphs, up to MAX_DECODE_STOP_IDS; a call without stop ids replays the decode
  // graphs alone (decode_on_device).
  bool has_decode_greedy() const override { return true; }
  bool can_decode_sample(const SamplingParams& p) const override;
  int max_stop_ids() const override { return opt_.graph ? MAX_DECODE_STOP_IDS : 0; }
  Expected<int> decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                    std::span<int32_t> out) override;
  Expected<int> decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                    std::span<const int32_t> stop_ids, std::span<int32_t> out) override;

  // --- for benchmarks ---
  // Pretends positions [0, n) are cached, with random K/V (attention cost depends only on the length).
  Status set_random_context(int n);
  // Positions [0, n) of the (shared) cache hold valid K/V: another backend wrote them.
  Status set_cached(int n);
  // Sets the decode state (token at pos; the steps' draws: sampling, temperature 0 = argmax) without running
  // anything; then replay_decode() runs one step each.
  Status begin_decode(int32_t token, int pos, const SamplingParams& sampling = {});
  void replay_decode();
  // Runs decode_steps_per_replay() steps (one graph launch when graphs are on).
  void replay_decode_k();
  int decode_steps_per_replay() const { return std::max(1, opt_.graph_steps); }
  // Attention decode splits of the variant that serves a step whose sequence holds seq_len positions (0: the
  // simple attention kernel, no splits).
  int decode_attention_splits(int seq_len) const;
  // Runs a prefill of `tokens` at pos without copying logits back (asynchronous).
  Status enqueue_prefill_only(std::span<const int32_t> tokens, int pos);
  cudaStream_t stream() const { return stream_; }
  size_t weight_bytes() const { return weights_.bytes; }
  int n_cached() const { return n_cached_; }
  // Whether the until graphs' bodies chain their kernels with PDL (built by the first call with stop ids).
  bool stop_body_pdl() const { return !stop_ || stop_->body_pdl; }

 private:
  // Decode variants by sequence length, each with the attention split count fitted to its longest sequence: a
  // count fitted to the whole cache leaves a short sequence with several splits and their combine. One CUDA graph
  // per variant (plus one of graph_steps steps); replays pick by decode_pos_.
  struct DecodeGraph {
    int max_seq_len;  // serves steps whose sequence (cached positions + the step's token) is at most this long
    int n_split;      // attention decode splits; 0: ops/attention_simple
    cudaGraphExec_t one = nullptr, k = nullptr;  // one step; graph_steps steps (graph_steps > 1)
  };

  CudaBackend(const ModelConfig& c, DeviceWeights w, int max_context, const CudaBackendOptions& opt);
  Status init(const DeviceKvCache* shared_kv);
  Status check_step(std::span<const int32_t> tokens, int pos) const;
  // sampling: the decode steps' draws (temperature 0 = argmax).
  void set_state(int32_t token, int pos, int n_tokens, const SamplingParams& sampling = {}, uint64_t first_draw = 0);
  Status decode_on_device(int32_t token, int pos, const SamplingParams& sampling, uint64_t first_draw,
                          std::span<int32_t> out);
  // Decode graph: the layers, the LM head with its argmax, and a finish kernel that feeds the argmax back (token,
  // position, the next step's embedding row in x_). begin_step (after set_state for one token) embeds the first.
  // n_split: cuda/attention's decode splits (0: ops/attention_simple).
  // stop: the finish kernel's stop check (decode_stop.h; default none).
  // forward()'s kernels without the copy and the wait: a 1-token step from the decode graph, else a prefill.
  Status enqueue_forward(std::span<const int32_t> tokens, int pos);
  void enqueue_decode(const Stream& s, int n_split, const StopCheck& stop = {});
  void begin_step();
  void enqueue_prefill_chunk(const Stream& s, int n_tokens, bool logits);
  // Runs one prefill chunk (its tokens and StepState already copied): from its CUDA graph once its length has one,
  // else eagerly (CudaBackendOptions::prefill_graphs, prefill_graph_at).
  Status run_prefill_chunk(int n_tokens, bool logits);
  Status capture_prefill(int n_tokens, bool logits, cudaGraphExec_t* out);  // and uploads it
  // Bias, q/k norm and RoPE of layer's qkv rows; q to q_out, K/V rows into the cache (decode and prefill alike).
  RopeQkvArgs rope_args(int layer, const float* qkv, __nv_bfloat16* q_out, int n_tokens) const;
  MatvecArgs lm_head_args(const float* x) const;  // the LM head matvec with the fused argmax
  void attend_decode(const Stream& s, int layer, int n_split);
  void attend_prefill(const Stream& s, int layer, int n_tokens);
  Status ensure_graph();
  Status capture_steps(int n_steps, int n_split, cudaGraphExec_t* out);
  // The decode variant that serves a step whose sequence holds seq_len positions.
  const DecodeGraph& variant_for(int seq_len) const;
  // Stop ids on the device (decode_stop.cu).
  Expected<int> decode_until(int32_t token, int pos, const SamplingParams& sampling, uint64_t first_draw,
                             std::span<const int32_t> stop_ids, std::span<int32_t> out);
  Status ensure_stop_graphs();
  Status capture_until(size_t variant, bool pdl, cudaGraphExec_t* out);

  ModelConfig config_;
  DeviceWeights weights_;
  DeviceKvCache kv_;
  CudaBackendOptions opt_;
  bool rope_in_attn_ = false;  // opt_.rope_in_attention resolved (init)
  int max_context_ = 0;
  int n_cached_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<DecodeGraph> graphs_;  // ascending max_seq_len, the last one the whole cache
  int decode_pos_ = 0;               // position of the next decode step, as the host enqueued them
  bool last_forward_prefill_ = false;  // the last forward ran the prefill (its argmax in StepState::argmax), not a step
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<StopGraphs> stop_;  // decode_*_until's graphs, built by the first call with stop ids
  // Prefill chunk lengths seen, by (chunk length, logits), each with its graph once captured (see
  // CudaBackendOptions::prefill_graphs; exec null: none yet, or retired).
  struct PrefillGraph {
    int n_tokens = 0;
    bool logits = false;
    int uses = 0;
    uint64_t last_use = 0;
    cudaGraphExec_t exec = nullptr;
  };
  std::vector<PrefillGraph> prefill_graphs_;
  uint64_t prefill_clock_ = 0;  // prefill chunks run, for last_use

  // Device buffers (one arena). Decode: fixed addresses captured by the graph.
  void* arena_ = nullptr;
  StepState* state_ = nullptr;
  int32_t* tokens_out_ = nullptr;  // [max_context] decode graph output
  float* x_ = nullptr;             // [n_embd] residual stream
  float* qkv_ = nullptr;           // [q_dim + 2 kv_dim]
  __nv_bfloat16* q_ = nullptr;     // [n_head, head_dim]
  __nv_bfloat16* attn_ = nullptr;  // [n_head, head_dim]
  float* h_ = nullptr;             // [n_ff]
  __nv_bfloat16* hb_ = nullptr;    // [n_ff] h in bf16 (h_bf16)
  float* logits_ = nullptr;        // [n_vocab]
  int32_t* drawn_ = nullptr;       // [1] sample_logits' token
  GridSampleScratch sample_scratch_{};  // grid_sample's (ops/sample.h), zeroed with the arena
  float* inv_freq_ = nullptr;      // [head_dim / 2]
  void* attn_ws_ = nullptr;        // attention decode workspace
  size_t attn_ws_bytes_ = 0;
  // Prefill chunk buffers, C = prefill_chunk.
  int32_t* tokens_ = nullptr;      // [C]
  float* px_ = nullptr;            // [C, n_embd]
  __nv_bfloat16* pxn_ = nullptr;   // [C, n_embd]
  float* pqkv_ = nullptr;          // [C, q_dim + 2 kv_dim]
  __nv_bfloat16* pq_ = nullptr;    // [C, n_head, head_dim]
  __nv_bfloat16* pattn_ = nullptr; // [C, n_head, head_dim]
  float* pgu_ = nullptr;           // [C, 2 n_ff]
  __nv_bfloat16* ph_ = nullptr;    // [C, n_ff]
};

}  // namespace cuda
}  // namespace mk
