// CudaBackend's decode with stop ids checked on the device (decode_stop.h): the until graphs (a gate kernel and
// WHILE nodes around the captured decode step) and decode_greedy_until / decode_sample_until.
// Tests: tests/gpu/test_backend_stop.cu (test_gpu --gtest_filter='BackendStop*').
#include <algorithm>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/decode_stop.cuh"
#include "cuda/common/cuda_check.h"

namespace mk::cuda {
namespace {

// First node of an until graph: the WHILE conditions from the call's state before any step of this variant runs
// (the steps of earlier variants' graphs, and the copies, are complete: plain stream order).
__global__ void stop_gate_kernel(StopCheck c, const int32_t* n_generated) {
  if (threadIdx.x != 0) return;
  const bool go = *reinterpret_cast<volatile int32_t*>(&c.state->stopped_at) == NOT_STOPPED;
  set_stop_conditions(c, *c.end, *n_generated, go);
}

}  // namespace

Expected<int> CudaBackend::decode_greedy_until(int32_t token, int pos, std::span<const int32_t> stop_ids,
                                               std::span<int32_t> out) {
  return decode_until(token, pos, SamplingParams{}, 0, stop_ids, out);
}

Expected<int> CudaBackend::decode_sample_until(int32_t token, int pos, const SamplingParams& p, uint64_t first_draw,
                                               std::span<const int32_t> stop_ids, std::span<int32_t> out) {
  if (!can_decode_sample(p))
    return make_error("decode_sample_until: the device draws with a temperature, top-k, top-p and min-p only (no "
                      "repetition penalty, valid parameters), got temperature ", p.temperature, ", top_k ", p.top_k,
                      ", top_p ", p.top_p, ", min_p ", p.min_p, ", repetition_penalty ", p.repetition_penalty);
  return decode_until(token, pos, p, first_draw, stop_ids, out);
}

Expected<int> CudaBackend::decode_until(int32_t token, int pos, const SamplingParams& sampling, uint64_t first_draw,
                                        std::span<const int32_t> stop_ids, std::span<int32_t> out) {
  if (stop_ids.size() > size_t(max_stop_ids()))
    return make_error("decode until a stop id: ", stop_ids.size(), " stop ids, at most ", max_stop_ids(),
                      " are checked on the device by the cuda backend",
                      opt_.graph ? "" : " (none without CUDA graphs: CudaBackendOptions::graph)");
  if (stop_ids.empty()) {  // the decode graphs alone, as before stop ids existed
    MK_TRY(decode_on_device(token, pos, sampling, first_draw, out));
    return int(out.size());
  }
  int32_t t[1] = {token};
  MK_TRY(check_step(t, pos));
  if (pos + int64_t(out.size()) > max_context_)
    return make_error("decode until a stop id: ", out.size(), " tokens from position ", pos,
                      " exceed the context length ", max_context_);
  if (out.empty()) return 0;
  MK_TRY(ensure_graph());  // may run one eager step: before setting the state
  MK_TRY(ensure_stop_graphs());
  set_state(token, pos, 1, sampling, first_draw);
  begin_step();
  // The call's steps by decode variant: step i (sequence pos + i + 1) runs in variant_for's graph, as replay_decode
  // would choose; each variant's graph runs its steps up to end[v] (StepState::n_generated counts them).
  DecodeStop& d = stop_->host->up;  // pinned; the previous call's copies are complete (it synchronised)
  d = DecodeStop{};
  d.n_ids = int32_t(stop_ids.size());
  std::copy(stop_ids.begin(), stop_ids.end(), d.ids);
  d.stopped_at = NOT_STOPPED;
  const int n = int(out.size());
  size_t launches[MAX_DECODE_VARIANTS];
  size_t n_launches = 0;
  for (int i = 0; i < n;) {
    const size_t v = size_t(&variant_for(pos + i + 1) - graphs_.data());
    const int end = v + 1 == graphs_.size() ? n : std::min(n, graphs_[v].max_seq_len - pos);
    d.end[v] = end;
    launches[n_launches++] = v;
    i = end;
  }
  // Stream order puts the copy before the graphs (the host does not touch `d` again before the sync below).
  CUDA_CHECK(cudaMemcpyAsync(stop_->state, &d, sizeof(d), cudaMemcpyHostToDevice, stream_));
  for (size_t k = 0; k < n_launches; ++k) CUDA_CHECK(cudaGraphLaunch(stop_->exec[launches[k]], stream_));
  CUDA_CHECK(cudaMemcpyAsync(&stop_->host->stopped_at, &stop_->state->stopped_at, 4, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens_out_, out.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "running decode until a stop id"));
  const int32_t stopped_at = stop_->host->stopped_at;
  // The tokens say the same: the first stop id among them is the last token produced.
  const auto first = std::find_if(out.begin(), out.end(), [&](int32_t x) {
    return std::find(stop_ids.begin(), stop_ids.end(), x) != stop_ids.end();
  });
  const int want = first == out.end() ? n : int(first - out.begin()) + 1;
  const int produced = stopped_at == NOT_STOPPED ? n : stopped_at;
  if (produced != want)
    return make_error("decode until a stop id: the device reports ", produced,
                      " tokens produced but the first stop id is token ", want, " of ", n,
                      " (the stop check disagrees with the tokens)");
  std::fill(out.begin() + produced, out.end(), -1);
  n_cached_ = pos + produced;  // the stop id was not fed; positions past it (steps of an S-step body) are not cached
  decode_pos_ = n_cached_;
  return produced;
}

Status CudaBackend::ensure_stop_graphs() {
  if (stop_) return {};
  if (graphs_.size() > size_t(MAX_DECODE_VARIANTS))
    return make_error("decode until a stop id: ", graphs_.size(), " decode variants, at most ", MAX_DECODE_VARIANTS);
  auto sg = std::make_unique<StopGraphs>();
  MK_TRY(cuda_status(cudaMalloc(&sg->state, sizeof(DecodeStop)), "allocating the stop state"));
  MK_TRY(cuda_status(cudaMemset(sg->state, 0, sizeof(DecodeStop)), "clearing the stop state"));
  MK_TRY(cuda_status(cudaMallocHost(&sg->host, sizeof(StopGraphs::Host)), "allocating pinned stop state"));
  sg->exec.assign(graphs_.size(), nullptr);
  stop_ = std::move(sg);
  for (size_t v = 0; v < graphs_.size(); ++v) {
    const bool pdl = opt_.pdl && stop_->body_pdl;
    const Status st = capture_until(v, pdl, &stop_->exec[v]);
    if (st.ok()) continue;
    (void)cudaGetLastError();
    if (pdl) {  // a driver that refuses programmatic edges inside a conditional body: no PDL there (slower, correct)
      stop_->body_pdl = false;
      const Status retry = capture_until(v, false, &stop_->exec[v]);
      if (retry.ok()) continue;
    }
    stop_.reset();
    return st;
  }
  return {};
}

Status CudaBackend::capture_until(size_t v, bool pdl, cudaGraphExec_t* out) {
  const int S = std::max(1, opt_.stop_graph_steps);
  const int n_split = graphs_[v].n_split;
  cudaGraph_t g = nullptr;
  MK_TRY(cuda_status(cudaGraphCreate(&g, 0), "creating the until graph"));
  struct Destroy {
    cudaGraph_t g;
    ~Destroy() { cudaGraphDestroy(g); }
  } destroy{g};
  StopCheck c;
  c.state = stop_->state;
  c.end = &stop_->state->end[v];
  c.loop_steps = S;
  // Reset to 0 at every launch; the gate sets them.
  MK_TRY(cuda_status(cudaGraphConditionalHandleCreate(&c.loop, g, 0, cudaGraphCondAssignDefault),
                     "creating a conditional handle"));
  if (S > 1)
    MK_TRY(cuda_status(cudaGraphConditionalHandleCreate(&c.tail, g, 0, cudaGraphCondAssignDefault),
                       "creating a conditional handle"));
  const int32_t* n_generated = &state_->n_generated;
  void* gate_args[] = {&c, &n_generated};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(stop_gate_kernel);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(32);
  kp.kernelParams = gate_args;
  cudaGraphNode_t gate = nullptr;
  MK_TRY(cuda_status(cudaGraphAddKernelNode(&gate, g, nullptr, 0, &kp), "adding the until graph's gate"));
  // A WHILE node after `dep` whose body is n_steps decode steps, the last one setting the conditions of `check`.
  auto add_loop = [&](cudaGraphNode_t dep, const StopCheck& check, int n_steps, cudaGraphNode_t* node) -> Status {
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = check.loop;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    MK_TRY(cuda_status(cudaGraphAddNode(node, g, &dep, nullptr, 1, &cp), "adding a WHILE node"));
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    MK_TRY(cuda_status(cudaStreamBeginCaptureToGraph(stream_, body, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed),
                       "capturing a WHILE body"));
    for (int i = 0; i < n_steps; ++i) {
      StopCheck ci = check;
      ci.set_conditions = i + 1 == n_steps;
      if (opt_.stop_prefetch && ci.set_conditions && !(opt_.leave_out & LEAVE_QKV)) {
        ci.prefetch = weights_.layers[0].wqkv;
        // At most 16 MiB, a third of the H200's L2 (8B: the first 16 of 50 MiB).
        ci.prefetch_bytes = uint32_t(std::min<size_t>(
            size_t(config_.q_dim() + 2 * config_.kv_dim()) * size_t(config_.n_embd) * 2, size_t(16) << 20));
      }
      enqueue_decode(Stream(stream_, pdl), n_split, ci);
    }
    cudaGraph_t captured = nullptr;
    return cuda_status(cudaStreamEndCapture(stream_, &captured), "capturing a WHILE body");
  };
  cudaGraphNode_t loop = nullptr, tail = nullptr;
  MK_TRY(add_loop(gate, c, S, &loop));
  if (S > 1) {
    StopCheck t = c;  // the tail: one step per body, its own condition
    t.loop = c.tail;
    t.tail = 0;
    t.loop_steps = 1;
    MK_TRY(add_loop(loop, t, 1, &tail));
  }
  MK_TRY(cuda_status(cudaGraphInstantiate(out, g, 0), "instantiating the until graph"));
  return cuda_status(cudaGraphUpload(*out, stream_), "uploading the until graph");
}

}  // namespace mk::cuda
