// MegakernelBackend (see megakernel_backend.h): device buffers, the schedule upload, launches.
#include "megakernel/device/megakernel_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/common/cuda_check.h"
#include "cuda/device_info.h"
#include "megakernel/device/interpreter.h"
#include "megakernel/device/ops/sample.cuh"

namespace mk::megakernel {

using cuda::cuda_status;
using device::MkLayer;
using device::MkParams;

namespace {

Status check_shapes(const ModelConfig& c) {
  if (c.head_dim != 64 && c.head_dim != 128)
    return make_error("megakernel: head_dim ", c.head_dim, " has no attention kernel (64 or 128 supported)");
  if (c.n_kv_head < 1 || c.n_head % c.n_kv_head != 0 || c.n_head / c.n_kv_head > 8)
    return make_error("megakernel: ", c.n_head, " q heads per ", c.n_kv_head,
                      " kv heads: the attention ops support groups of at most 8 q heads");
  if (c.n_embd % 8 != 0 || c.n_ff % 8 != 0)
    return make_error("megakernel: n_embd ", c.n_embd, " and n_ff ", c.n_ff,
                      " must be multiples of 8 (16-byte weight loads)");
  return {};
}

template <class T>
Status alloc(T*& p, size_t n, const char* what) {
  void* v = nullptr;
  MK_TRY(cuda_status(cudaMalloc(&v, std::max<size_t>(n, 1) * sizeof(T)), what));
  p = static_cast<T*>(v);
  return {};
}

}  // namespace

Expected<std::unique_ptr<MegakernelBackend>> MegakernelBackend::create(const ModelConfig& config,
                                                                       cuda::DeviceWeights weights, int max_context,
                                                                       const MegakernelOptions& opt) {
  MK_TRY(check_shapes(config));
  if (weights.rope_pair_rows)
    return make_error("megakernel: the weights were uploaded in the layered path's rope-pair row order; the "
                      "megakernel reads the Hugging Face order (upload_weights(..., rope_pair_rows = false))");
  std::unique_ptr<MegakernelBackend> b(new MegakernelBackend());
  b->config_ = config;
  b->weights_ = std::move(weights);
  b->max_context_ = max_context;
  MK_TRY(b->init(opt));
  return std::move(b);
}

int MegakernelBackend::attn_mma_warps() const {
  return std::min(attn_mma_want_, device::attn_mma_fit(smem_x_floats_, config_.head_dim));
}

Status MegakernelBackend::init(const MegakernelOptions& opt) {
  auto dev = cuda::query_device();
  if (!dev) return dev.error();
  n_sm_ = opt.n_sm > 0 ? std::min(opt.n_sm, dev->sm_count) : dev->sm_count;
  ScheduleOptions so;
  so.n_sm = n_sm_;
  so.max_context = max_context_;
  so.attn_chunk_len = opt.attn_chunk_len;
  so.attn_chunks_dynamic = opt.attn_chunks_dynamic;
  // Inline attention only for caches of at most INLINE_ATTENTION_MAX positions that attn_short (the flag protocol's
  // inline path) holds whole; longer ones split (the merge stage and attn_mma under flags). Inline attention is done for
  // its kv group by every SM of the group, so its cost grows with the position, ~1 / 2 / 3.6 µs per position per step
  // at 1B / Qwen3-0.6B / 8B, while split attention's is nearly flat (H200, session 23 call 3, 128 steps from ctx:
  // inline / split ms/token 1B 128 0.855 / 0.901, 256 0.980 / 0.910, 512 1.295 / 0.920; Qwen3-0.6B 256 1.126 / 0.869,
  // 850 2.434 / 0.892; 8B 256 4.956 / 4.562, 850 7.017 / 4.618): inline wins up to an average position of ~190-240.
  // An explicit MegakernelOptions::inline_max is clamped the same way (past attn_short's hold: attn_range inline, 1B
  // ctx 850 1.266 ms/token against 0.928 split, session 23 call 2).
  if (opt.attn_short && opt.weight_ring && opt.flag_publish != 0)
    so.inline_max = std::min(opt.inline_max >= 0 ? opt.inline_max : INLINE_ATTENTION_MAX,
                             device::attn_short_plan(config_.n_head / config_.n_kv_head, config_.head_dim).max_n);
  else if (opt.inline_max >= 0)
    so.inline_max = opt.inline_max;
  so.slices_per_sm = opt.slices_per_sm;
  so.mid_resid = opt.mid_resid;
  mid_resid_ = opt.mid_resid;
  // The dynamic LM head's units: one ring page of rows each (when a row fits a page); lm_static_share of each
  // slice's even share static (the loader streams those before its consumers arrive, with no claims), the rest
  // claimed (ring.cuh loader_lm_dynamic).
  if (2 * config_.n_embd <= device::PAGE_BYTES) {
    so.lm_unit_rows = device::page_rows(config_.n_embd);
    const int units = (config_.n_vocab + so.lm_unit_rows - 1) / so.lm_unit_rows;
    const int slices = int(split_rows(config_.n_vocab, n_sm_ * std::max(1, opt.slices_per_sm), so.row_granularity).size());
    so.lm_static_units = std::max(2, int(std::clamp(opt.lm_static_share, 0.0, 1.0) * double(units) / double(slices)));
  }
  auto s = build_schedule(config_, so);
  if (!s) return s.error();
  schedule_ = std::move(*s);
  const Layout& L = schedule_.layout;
  // Shared-memory plan (floats): s_x holds the op's input vector; s_aux the gate/up rows or attention.
  int max_gu_rows = 0;
  for (const auto& q : schedule_.queues)
    for (const Instr& in : q) {
      if (in.op == Op::MlpGateUp) max_gu_rows = std::max(max_gu_rows, int(in.row_end - in.row_begin));
      if (in.op == Op::MlpGateUpDown)  // simulator only: measured not worth building on the device (isa.h)
        return make_error("megakernel: the device interpreter has no ", op_name(in.op), " (schedule fuse_down)");
    }
  const int G = L.group, hd = L.head_dim;
  // s_x: a matvec's input (MlpDown's act as bf16 pairs, n_ff / 2 floats: ops/mlp.cuh), before a dependency wait the
  // prefetched norm weights (at [n_embd, 2 n_embd)), the attention K/V stage (attn_range: 4 x 16 B per consumer
  // thread; attn_short: below) and the sampled draw's scratch (ops/sample.cuh).
  int x_floats = (std::max({L.n_embd, (L.n_ff + 1) / 2, G * hd, 2 * L.n_embd, 4 * device::NCT * 4,
                            device::sample_scratch_floats(L.n_sample_parts, L.sample_part_tiles)}) + 3) / 4 * 4;
  // s_aux: the gate/up rows, the attention's scratch (+ hd: the RoPE table).
  smem_aux_floats_ = (std::max({2 * max_gu_rows, 2 * device::WARPS,
                                (G + 2) * hd + G * hd + 2 * G + device::WARPS * G * (hd + 2) + hd}) + 3) / 4 * 4;
  const size_t optin = dev->smem_per_block_optin;
  const size_t other = device::smem_bytes_without_ring(0, smem_aux_floats_) + 128 + 128;  // + static, + alignment
  if (other + size_t(x_floats) * 4 > optin)
    return make_error("megakernel: needs ", other + size_t(x_floats) * 4, " B of shared memory per block, the GPU allows ",
                      optin, "; use the layered backend");
  // Weight ring: as many pages as fit beside the op buffers (at least 2), when every weight row fits a page.
  const int max_row_bytes = 2 * std::max({L.n_embd, L.n_ff, G * hd});
  auto pages_that_fit = [&](int x) {
    const int n = max_row_bytes <= device::PAGE_BYTES
                      ? std::min<int>(device::MAX_PAGES, int((optin - other - size_t(x) * 4) / device::PAGE_BYTES))
                      : 0;
    return n < 2 ? 0 : n;
  };
  auto pages_wanted = [&](int fit) {
    return opt.weight_ring ? (opt.ring_pages > 0 ? std::min(fit, std::max(2, opt.ring_pages)) : fit) : 0;
  };
  // attn_short's K/V stage (inline attention; ops/attn_short.cuh): [NC][C | 1] + [C][NC] x 16 B for C positions,
  // NC = hd / 8 -- the same room holds attn_flat's 16-key tiles. Up to 256 positions, s_x grown into the room the
  // wanted ring pages leave; MlpGateUp's extra page (gate_up_extra_pages) only where it still fits after the stage.
  // H200: session 22 (attn_short) reserved the extra page's room first where a page holds a single row (8B: 5 pages and
  // a 75-position stage 4.190 ms/token against 4.315 with 4 pages and 140); with attn_flat the stage wins (session 32
  // call 7: 8B 3.963 -> 3.896, sampled 4.109 -> 4.032 with 4 pages and 139 positions, attn_flat up to pos 127).
  attn_stage_ = attn_short_max_ = attn_flat_tiles_ = 0;
  if (L.n_chunks == 1) {
    const int nc = hd / 8;
    const int want_pos = std::min(max_context_, opt.attn_stage_positions > 0 ? opt.attn_stage_positions : 256);
    const int want_x = nc * (2 * want_pos + 1) * 4;
    const size_t ring = size_t(pages_wanted(pages_that_fit(x_floats))) * device::PAGE_BYTES;
    const int x_room = int((optin - other - ring) / 16 * 4);
    x_floats = std::max(x_floats, std::min(want_x, x_room));
    attn_stage_ = std::min(want_pos, (x_floats / 4 / nc - 1) / 2);
    attn_short_max_ = std::min(max_context_, device::attn_short_plan(G, hd).max_n);
    // attn_flat's 16-key tiles in the same room: the positions attn_short's stage holds, in whole tiles (C positions
    // take 4 hd C + 2 hd bytes there, T = C / 16 tiles 4 hd C or less).
    attn_flat_tiles_ = attn_stage_ / device::MMA_TK;
  }
  // Split attention with flags: AttnOProj's merge stage in s_x (its group's chunk partials past the merged outputs,
  // device::merge_stage_offset), s_x grown for it when the ring keeps at least 2 pages; and (session 17) the SPLIT
  // instances' AttnPartial on the tensor cores (ops/attn_mma.cuh): s_x grown, into the room the wanted ring pages
  // leave, to hold the tile stages of every warp that streams tiles. Where either does not fit, split attention
  // publishes with counters (the flag protocol is refused).
  attn_mma_want_ = 0;
  if (L.n_chunks > 1) {
    const int64_t want = (device::merge_stage_offset(G, hd) + int64_t(L.n_chunks) * L.att_part_stride + 3) / 4 * 4;
    if (want <= x_floats || (want < (1 << 30) && pages_that_fit(int(want)) >= 2)) {
      x_floats = std::max(x_floats, int(want));
      merge_stage_ = true;
    }
    attn_mma_want_ = opt.attn_mma_warps > 0 ? std::min(opt.attn_mma_warps, device::WARPS) : device::WARPS;
    const int want_x = attn_mma_want_ * device::MMA_NS * device::attn_mma_stage_bytes(hd) / 4;
    const size_t ring = size_t(pages_wanted(pages_that_fit(x_floats))) * device::PAGE_BYTES;
    const int x_room = int((optin - other - ring) / 16 * 4);
    x_floats = std::max(x_floats, std::min(want_x, x_room));
  }
  smem_x_floats_ = x_floats;
  merge_stage_ = merge_stage_ && attn_mma_warps() > 0;
  attn_short_ = opt.attn_short;
  attn_flat_ = opt.attn_flat;
  lm_dynamic_ = opt.lm_dynamic;
  gate_pages_ = std::max(0, opt.gate_pages);
  gate_pages_gu_ = std::max(0, opt.gate_pages_gate_up);
  max_pages_ = pages_that_fit(smem_x_floats_);
  n_pages_ = pages_wanted(max_pages_);
  gu_extra_pages_ = 0;
  if (L.n_chunks == 1 && n_pages_ > 0 && opt.gate_up_extra_pages > 0) {  // MegakernelOptions::gate_up_extra_pages
    gu_extra_pages_ = std::max(0, std::min(opt.gate_up_extra_pages, max_pages_ - n_pages_));
    n_pages_ += gu_extra_pages_;
  }
  // Flag protocol: as asked, or by default wherever it can run (a ring; with split attention, the merge stage).
  // H200, 1B, session 13: split attention with flags (merge stage, attn_split) 1.123 / 1.588 ms/token at ctx 4096 /
  // 16384 against 1.211 / 1.587 with counters (bench/RESULTS.md, the closing call and mk8); attn_mma since session 17.
  flags_ = opt.flag_publish < 0 ? n_pages_ > 0 && (L.n_chunks == 1 || merge_stage_) : opt.flag_publish != 0;
  if (flags_ && L.n_chunks > 1 && !merge_stage_)
    return make_error("megakernel: flag publishing with ", L.n_chunks, " attention chunks needs a merge stage of their partials "
                      "and attention tile stages that do not fit in shared memory (raise attn_chunk_len)");
  MK_TRY(kv_.init(config_, max_context_));
  MK_TRY(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "megakernel: stream"));
  std::vector<Instr> instrs;
  std::vector<uint32_t> offsets;
  schedule_.flatten(instrs, offsets);
  Instr* d_instrs = nullptr;
  MK_TRY(alloc(d_instrs, instrs.size(), "megakernel: instructions"));
  instrs_ = d_instrs;
  MK_TRY(alloc(queue_begin_, offsets.size(), "megakernel: queues"));
  CUDA_CHECK(cudaMemcpy(instrs_, instrs.data(), instrs.size() * sizeof(Instr), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(queue_begin_, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  std::vector<MkLayer> layers(size_t(config_.n_layer));
  for (int l = 0; l < config_.n_layer; ++l) {
    const cuda::DeviceLayer& w = weights_.layers[size_t(l)];
    layers[size_t(l)] = MkLayer{w.attn_norm, w.wqkv,     w.bqkv,   w.q_norm,          w.k_norm,         w.wo,
                                w.mlp_norm,  w.w_gate_up, w.w_down, kv_.layer(l).k, kv_.layer(l).v};
  }
  MkLayer* d_layers = nullptr;
  MK_TRY(alloc(d_layers, layers.size(), "megakernel: layer table"));
  layers_ = d_layers;
  CUDA_CHECK(cudaMemcpy(layers_, layers.data(), layers.size() * sizeof(MkLayer), cudaMemcpyHostToDevice));
  std::vector<float> inv_freq;
  cpu::rope_inv_freq(inv_freq, config_.rope, config_.head_dim);
  MK_TRY(alloc(inv_freq_, inv_freq.size(), "megakernel: rope"));
  CUDA_CHECK(cudaMemcpy(inv_freq_, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
  MK_TRY(alloc(ws_, size_t(L.workspace_floats), "megakernel: workspace"));
  CUDA_CHECK(cudaMemset(ws_, 0xff, size_t(L.workspace_floats) * 4));  // NaN poison: unwritten reads show
  MK_TRY(alloc(tokens_, MAX_STEPS + 1, "megakernel: tokens"));
  // + 1: the flag protocol's step barrier (MkParams::step_counter).
  MK_TRY(alloc(counters_, size_t(L.n_counters) + 1, "megakernel: counters"));
  CUDA_CHECK(cudaMemset(counters_, 0, (size_t(L.n_counters) + 1) * 4));
  MK_TRY(alloc(fws_, size_t(L.workspace_floats), "megakernel: flagged workspace"));
  CUDA_CHECK(cudaMemset(fws_, 0xff, size_t(L.workspace_floats) * 8));  // epoch 0xffffffff: never fresh
  CUDA_CHECK(cudaMemset(fws_ + L.mid_acc, 0, mid_acc_bytes()));  // isa.h mid_acc_word
  MK_TRY(alloc(ftokens_, MAX_STEPS + 1, "megakernel: flagged tokens"));
  CUDA_CHECK(cudaMemset(ftokens_, 0xff, (MAX_STEPS + 1) * 8));
  n_active_ = 0;
  for (const auto& q : schedule_.queues) n_active_ += q.empty() ? 0 : 1;
  MK_TRY(alloc(lm_claim_, 1, "megakernel: LM-head claim counter"));
  CUDA_CHECK(cudaMemset(lm_claim_, 0, sizeof(unsigned long long)));
  MK_TRY(alloc(error_, 4, "megakernel: error word"));
  CUDA_CHECK(cudaMemset(error_, 0, 16));
  MK_TRY(alloc(out_tokens_, size_t(max_context_), "megakernel: output tokens"));
  MK_TRY(alloc(stop_state_, 2, "megakernel: stop state"));
  CUDA_CHECK(cudaMemset(stop_state_, 0, 8));
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev->index));
  watchdog_cycles_ = (long long)(opt.watchdog_s * double(clock_khz) * 1e3);
  if (opt.layered_prefill) {
    auto p = cuda::CudaBackend::create(config_, weights_.alias(), max_context_, {}, &kv_);
    if (!p) return make_error("megakernel: the layered prefill: ", p.message());
    prefill_ = std::move(*p);
  }
  return {};
}

MegakernelBackend::~MegakernelBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : {instrs_, static_cast<void*>(queue_begin_), layers_, static_cast<void*>(inv_freq_),
                  static_cast<void*>(ws_), static_cast<void*>(tokens_), static_cast<void*>(counters_),
                  static_cast<void*>(error_), static_cast<void*>(out_tokens_), static_cast<void*>(timing_),
                  static_cast<void*>(fws_), static_cast<void*>(ftokens_), static_cast<void*>(lm_claim_),
                  static_cast<void*>(stop_state_)})
    if (p) cudaFree(p);
  if (stream_) cudaStreamDestroy(stream_);
}

Status MegakernelBackend::enqueue(int32_t token, int pos, int n_steps, const SampleParams& sample,
                                  const LaunchStops& stops) {
  if (broken_) return make_error("megakernel: a previous step timed out; create a new backend");
  if (n_steps < 1 || n_steps > MAX_STEPS) return make_error("megakernel: ", n_steps, " steps per launch, expected 1..", MAX_STEPS);
  if (pos < 0 || pos + n_steps > max_context_)
    return make_error("megakernel: positions [", pos, ", ", pos + n_steps, ") exceed the context of ", max_context_);
  if (flags_ && n_pages_ == 0)
    return make_error("megakernel: flag-in-data publishing runs with the weight ring only (set_weight_ring(true))");
  if (flags_ && schedule_.layout.n_chunks > 1 && !merge_stage_ && sample.temperature <= 0.f)
    return make_error("megakernel: flag-in-data publishing with split attention needs the merge stage, which does not fit");
  if (sample.temperature > 0.f && n_pages_ == 0)
    return make_error("megakernel: sampled launches run with the weight ring only (set_weight_ring(true))");
  if (token >= 0) {
    CUDA_CHECK(cudaMemcpyAsync(tokens_, &token, 4, cudaMemcpyHostToDevice, stream_));
    const unsigned long long pair = (static_cast<unsigned long long>(epoch_) << 32) | uint32_t(token);
    CUDA_CHECK(cudaMemcpyAsync(ftokens_, &pair, 8, cudaMemcpyHostToDevice, stream_));
  }
  // The mid-layer residual accumulator (isa.h mid_acc_word) is left zero for the next step only by steps that use it.
  const bool mid_acc = flags_ && mid_resid_;
  if (mid_acc && !mid_acc_clear_) MK_TRY(clear_mid_acc());
  mid_acc_clear_ = mid_acc;
  MkParams p{};
  p.instrs = static_cast<const Instr*>(instrs_);
  p.queue_begin = queue_begin_;
  p.layers = static_cast<const MkLayer*>(layers_);
  p.tok_embd = weights_.tok_embd;
  p.lm_head = weights_.lm_head;
  p.final_norm = weights_.final_norm;
  p.inv_freq = inv_freq_;
  p.block_table = kv_.block_table_data();
  static_assert(cuda::KV_BLOCK_SIZE == device::KV_BLOCK, "the interpreter's kv_offset assumes this block size");
  p.ws = ws_;
  p.tokens = tokens_;
  p.counters = counters_;
  p.error = error_;
  p.L = schedule_.layout;
  p.eps = config_.rms_norm_eps;
  // Counters reach (epoch + 1) * count only through counter-protocol steps, so that protocol counts its own
  // epochs; flag tags use the total step count (unique per step whatever protocol ran before).
  p.epoch0 = flags_ ? epoch_ : counter_steps_;
  p.pos0 = pos;
  p.n_steps = n_steps;
  p.watchdog_cycles = watchdog_cycles_;
  p.n_pages = n_pages_;
  p.gate_pages = n_pages_ > 0 ? gate_pages_ : 0;
  p.gate_pages_gu = n_pages_ > 0 ? gate_up_gate() : 0;
  p.prefetch = prefetch_ ? 1 : 0;
  p.rope_early = rope_early_ ? 1 : 0;
  p.attn_short_max = attn_short_ ? attn_short_max_ : 0;
  p.attn_stage = attn_stage_;
  p.attn_flat_tiles = attn_flat_ ? attn_flat_tiles_ : 0;
  p.attn_mma_warps = attn_mma_warps();
  const bool lm_dyn = lm_dynamic_on();
  p.lm_dynamic = lm_dyn ? 1 : 0;
  p.lm_claim = lm_claim_;
  p.lm_base = lm_claims_;
  p.timing = timing_;
  p.n_instr = uint32_t(schedule_.n_instr());
  timing_steps_ = n_steps;
  p.smem_x_floats = smem_x_floats_;
  p.smem_aux_floats = smem_aux_floats_;
  p.L.mid_resid = mid_resid_ ? 1 : 0;
  p.flags = flags_ ? 1 : 0;
  p.fws = fws_;
  p.ftokens = ftokens_;
  p.step_counter = counters_ + schedule_.layout.n_counters;
  p.step_base = flag_steps_;
  p.n_active = n_active_;
  p.sample = sample;
  p.stop = stops.ids;
  p.stop_state = stop_state_;
  p.launch_seq = ++launch_seq_;
  p.call_seq = stops.call_seq;
  p.produced_base = stops.produced_base;
  p.tag0 = epoch_;
  MK_TRY(cuda_status(device::launch_megakernel(p, n_sm_, stream_), "megakernel: launch"));
  count_steps(n_steps, lm_dyn);
  return {};
}

Status MegakernelBackend::clear_mid_acc() {
  CUDA_CHECK(cudaMemsetAsync(fws_ + schedule_.layout.mid_acc, 0, mid_acc_bytes(), stream_));
  return {};
}

void MegakernelBackend::count_steps(int64_t n, bool lm_dyn) {
  epoch_ += uint32_t(n);  // modulo 2^32, as the device's epochs
  (flags_ ? flag_steps_ : counter_steps_) += uint32_t(n);
  if (lm_dyn) lm_claims_ += (unsigned long long)n * (unsigned long long)schedule_.layout.lm_claims_per_step();
}

Status MegakernelBackend::check_error() {
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "megakernel: step"));
  uint32_t e[4];
  CUDA_CHECK(cudaMemcpy(e, error_, 16, cudaMemcpyDeviceToHost));
  if (e[0] == 0) return {};
  broken_ = true;
  if (e[0] == 2) return make_error("megakernel: the dynamic LM head's claim counter fell behind its step's range (block ", e[1], ")");
  if (e[0] == 3) return make_error("megakernel: no finite logit to sample from at position ", e[3]);
  return make_error("megakernel: watchdog: block ", e[1], " waited too long on counter ", e[3],
                    " before instruction ", e[2], " (a dependency that never completes)");
}

Status MegakernelBackend::forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) {
  if (logits.size() != size_t(config_.n_vocab))
    return make_error("megakernel: logits buffer holds ", logits.size(), " floats, expected n_vocab = ", config_.n_vocab);
  return run_forward(tokens, pos, logits);
}

Status MegakernelBackend::forward_on_device(std::span<const int32_t> tokens, int pos) {
  return run_forward(tokens, pos, {});
}

Status MegakernelBackend::run_forward(std::span<const int32_t> tokens, int pos, std::span<float> logits) {
  if (tokens.empty()) return make_error("megakernel: forward called with no tokens");
  if (pos != n_cached_)
    return make_error("megakernel: forward at position ", pos, " but ", n_cached_, " positions are cached");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.n_vocab)
      return make_error("megakernel: token id ", tokens[i], " is outside the vocabulary [0, ", config_.n_vocab, ")");
  last_logits_ = Logits::None;
  if (prefill_ && tokens.size() > 1) {  // the layered prefill writes the same cache (it finishes before returning)
    MK_TRY(prefill_->set_cached(pos));
    MK_TRY(logits.empty() ? prefill_->forward_on_device(tokens, pos) : prefill_->forward(tokens, pos, logits));
    last_logits_ = Logits::Prefill;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) MK_TRY(enqueue(tokens[i], pos + int(i), 1));
    if (!logits.empty())
      CUDA_CHECK(cudaMemcpyAsync(logits.data(), ws_ + schedule_.layout.logits, logits.size() * 4,
                                 cudaMemcpyDeviceToHost, stream_));
    MK_TRY(check_error());
    last_logits_ = Logits::Own;
  }
  n_cached_ = pos + int(tokens.size());
  return {};
}

void MegakernelBackend::truncate(int pos) { n_cached_ = std::clamp(pos, 0, n_cached_); }

Status MegakernelBackend::generate_greedy(int32_t token, int pos, std::span<int32_t> out, int steps_per_launch) {
  auto n = generate_until(token, pos, out, steps_per_launch, {}, {});
  if (!n) return n.error();
  return {};
}

Expected<int> MegakernelBackend::generate_until(int32_t token, int pos, std::span<int32_t> out, int steps_per_launch,
                                                const SampleParams& sample_in, std::span<const int32_t> stop_ids) {
  if (pos != n_cached_) return make_error("megakernel: generate at position ", pos, " but ", n_cached_, " are cached");
  if (pos + int(out.size()) > max_context_)
    return make_error("megakernel: ", pos + out.size(), " positions exceed the context of ", max_context_);
  if (stop_ids.size() > size_t(MAX_STOP_IDS))
    return make_error("megakernel: ", stop_ids.size(), " stop ids, at most ", MAX_STOP_IDS,
                      " are checked on the device (isa.h MAX_STOP_IDS)");
  if (steps_per_launch < 1) return make_error("megakernel: ", steps_per_launch, " steps per launch, expected >= 1");
  if (!stop_ids.empty() && n_pages_ == 0)
    return make_error("megakernel: stop ids are checked on the device with the weight ring only (set_weight_ring(true))");
  last_logits_ = Logits::None;  // the launches overwrite ws_'s logits
  if (out.empty()) return 0;
  SampleParams sample = sample_in;
  LaunchStops stops;
  stops.ids.n = int32_t(stop_ids.size());
  std::copy(stop_ids.begin(), stop_ids.end(), stops.ids.ids);
  stops.call_seq = launch_seq_ + 1;  // the first launch's number (enqueue increments)
  const bool lm_dyn = lm_dynamic_on();
  int done = 0;
  while (done < int(out.size())) {
    const int k = std::min(steps_per_launch, int(out.size()) - done);
    stops.produced_base = done;
    MK_TRY(enqueue(done == 0 ? token : -1, pos + done, k, sample, stops));
    sample.first_draw += uint64_t(k);
    // Outputs tokens[1..k]; the last becomes the next launch's input, all on the stream (no host sync).
    CUDA_CHECK(cudaMemcpyAsync(out_tokens_ + done, tokens_ + 1, size_t(k) * 4, cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(tokens_, tokens_ + k, 4, cudaMemcpyDeviceToDevice, stream_));
    // The flagged token of step k carries epoch epoch0 + k: the next launch's epoch0.
    CUDA_CHECK(cudaMemcpyAsync(ftokens_, ftokens_ + k, 8, cudaMemcpyDeviceToDevice, stream_));
    done += k;
  }
  CUDA_CHECK(cudaMemcpyAsync(out.data(), out_tokens_, out.size() * 4, cudaMemcpyDeviceToHost, stream_));
  uint32_t produced_dev = 0;  // stop_state[0]: the Argmax wrote it at every step that ran
  if (stops.ids.n > 0)
    CUDA_CHECK(cudaMemcpyAsync(&produced_dev, stop_state_, 4, cudaMemcpyDeviceToHost, stream_));
  MK_TRY(check_error());
  int produced = int(out.size());
  if (stops.ids.n > 0) {
    // The tokens say the same: the first stop id is the last token produced.
    const auto first = std::find_if(out.begin(), out.end(), [&](int32_t t) { return stops.ids.has(t); });
    const int want = first == out.end() ? int(out.size()) : int(first - out.begin()) + 1;
    if (int64_t(produced_dev) != want) {
      broken_ = true;
      return make_error("megakernel: the device reports ", produced_dev, " tokens produced but its first stop id is token ",
                        want, " of ", out.size(), " (the stop check disagrees with the Argmax)");
    }
    produced = want;
    // The steps after the stop did not run: the counters stand as after `produced` steps.
    count_steps(-int64_t(int(out.size()) - produced), lm_dyn);
    std::fill(out.begin() + produced, out.end(), -1);
  }
  n_cached_ = pos + produced;
  return produced;
}

Status MegakernelBackend::set_random_context(int n) {
  if (n < 0 || n > max_context_) return make_error("megakernel: random context ", n, " exceeds ", max_context_);
  kv_.fill_random(12345, stream_);
  MK_TRY(cuda_status(cudaStreamSynchronize(stream_), "megakernel: filling the KV cache"));
  n_cached_ = n;
  last_logits_ = Logits::None;
  return {};
}

Expected<std::unique_ptr<Backend>> make_megakernel_backend(const Model& model, int max_context) {
  MK_TRY(check_shapes(model.config));
  if (max_context <= 0) max_context = std::min(model.config.max_position > 0 ? model.config.max_position : 4096, 4096);
  auto w = cuda::upload_weights(model.config, model.weights);
  if (!w) return w.error();
  auto b = MegakernelBackend::create(model.config, std::move(*w), max_context);
  if (!b) return b.error();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace mk::megakernel
