// The megakernel interpreter: one persistent block per SM walks its queue of instructions (isa.h)
// for n_steps decode steps, waiting on and signalling the monotonic epoch counters exactly as the
// simulator (sim.cpp) does. All SMs must be resident at once: the launch is cooperative, so the
// driver refuses a grid that cannot be co-resident instead of letting it deadlock.
//
// Version 4 (bench/RESULTS.md has each version's figures): warp specialisation. Warp 15 is the weight
// loader (ring.cuh): it streams every weight row of the block's queue into a ring of shared-memory
// pages, running ahead across instructions and dependency waits. Warps 0..WARPS-1 are consumers: they wait
// for the dependencies (thread 0 polls with ld.acquire), compute from the pages and publish (barrier +
// fence + atomic increment). MkParams::n_pages = 0 runs the consumers without a ring, loading weights
// themselves (version 2's scheme, on the consumer warps). With MkParams::timing set, thread 0 records per
// instruction: wait start/end, first matvec page, compute end, publish end and the page waits of warp 0
// (globaltimer ns); MegakernelBackend::timing_report() sums them per op.
// Measured (H200, 1B shapes, ctx 32): ring 1.13-1.15 ms/token vs 1.16-1.18 without; the timestamps show
// the loader stalled on a full ring ~600 us per step -- while the consumers wait (~130 us), prepare an
// op (residual sums, norms, inline attention: ~250 us) and publish (the fence waits for the ring's bulk
// copies: ~3.3 us per instruction, ~200 us) -- so the 160 KB ring covers only ~4.7 us of each ~9 us
// consumer gap. bench/RESULTS.md has the figures and what was tried (cp.async loader, L2 run-ahead).
// Version 5: loads that do not depend on this step's producers go out before the wait (norm weights, block
// table, the first cached K/V positions: MkParams::prefetch), attention in one pass for 4 q heads per kv
// head, and the waiter's post-acquire fence left out (PUBLISH_RELEASE_NOFENCE_WAIT, params.cuh says why it
// is correct): 1.042 / 1.275 / 1.674 ms/token at ctx 32 / 4096 / 16384 (v4 1.146 / 1.410 / 1.882).
// Version 6 (measured, bench/RESULTS.md): split attention's K/V through per-thread cp.async stages gained
// nothing (1.341 vs 1.340 ms at ctx 4096) and its extra code raised the ring kernel's spills (20 -> 52 B), so it
// was removed again; chunk ranges that follow the step's position (attn_chunks_dynamic, isa.h
// attn_chunk_range) gain 1.5-2% at long contexts on their own and are the default.
// Version 7: flag-in-data publishing (FLAG instance, MkParams::flags; params.cuh says why it is ordered):
// no counter waits or signals, each op polls the (value, epoch) pairs it reads, a release/acquire step
// barrier per step; and the mid-layer residual materialised by MlpGateUp (Layout::mid_resid), so QkvProj
// and LmHead sum 2 vectors instead of 2 + n_kv_head. Measured (H200, bench/RESULTS.md): flags + mid-layer residual
// 1.016-1.019 ms/token at ctx 32 (v6 1.075); with split attention flags lose (1.284 vs 1.239 at ctx 4096), so
// the default publishes with flags exactly when attention is inline; counters + mid residual 1.239 / 1.610 at
// ctx 4096 / 16384 (v6 1.259 / 1.656).
// Version 8 (bench/RESULTS.md "Megakernel v8"): the ring runs at most 4 pages (MegakernelOptions::ring_pages; 128 KB
// in flight per SM measured best: 1B 0.996 vs 1.021 ms/token with all 5 that fit, 3 pages no better than 5), and
// attn_range skips empty position slots, idle warps' merges and empty warp partials where attention is inline
// (attn_skip, bit-identical; −0.9% at ctx 32, +2% at 16384 in the counter instance, so tied to flags):
// 0.985 / 1.236 / 1.615 ms/token at ctx 32 / 4096 / 16384, 8B 5.084 (v7 1.023 / 1.246 / 1.619 / 5.109, same
// process). The attention's K/V wait was measured (T_ATT_KV): 3.5 of its 86-100 us per SM per step, so the
// inline attention is instruction latency, not memory; issuing its K/V one instruction early (kv_early) or
// without the block-table round trip (blk_smem) gained nothing (kv_early loses 4-5% at long contexts): both off.
// Version 9 (bench/RESULTS.md "Megakernel v9"): inline attention of short contexts in three parallel phases
// (ops/attn_short.cuh: scores of every (q head, position) pair at once, a warp per head's softmax, P.V over
// warps) instead of attn_range's chained online softmax, its K/V stage holding every position; and the switches
// measured not to help are gone (blk_smem, kv_early, attn_skip, the cp.async loader, the L2 run-ahead, the K/V L2
// prefetch, the fence.sc publish modes, the unfenced-publish bound): one instance per (ring, protocol) again.
// attn_short runs in the flag instance only (inline attention publishes with flags by default): compiled into the
// counter instance it raised that instance's spills 28 -> 132 B and cost 3-4% at ctx 4096 / 16384. Measured (H200,
// same process as the v8 binary): 0.951 / 1.228 / 1.598 ms/token at ctx 32 / 4096 / 16384 (v8 0.988 / 1.236 /
// 1.618), 8B 5.021 (v8 5.089). ptxas spill stores: 266 / 28 / 272 B (no ring / counters / flags).
// Version 10 (bench/RESULTS.md "Megakernel v10"): the Argmax reduced by every consumer thread (v9's thread 0 looped
// over the 132 LM-head slices, one L2 round trip each: 35 us per step on the critical path), and the dynamic LM
// head (ring.cuh loader_lm_dynamic: the last quarter of the LM head's pages claimed by whichever SM's loader comes
// first). Measured (H200, same process as v9's paths): 1B 0.922-0.924 / 1.211 / 1.591 ms/token at ctx 32 / 4096 /
// 16384 (v9 paths 0.947 / 1.233 / 1.624), 8B 4.99-5.01 (5.009). Wider residual polls (more loads in flight per
// thread) were 16-21% slower (spills) and are gone. ptxas spill stores: 270 / 28 / 220 B.
// Sampled launches (MkParams::sample, isa.h SampleParams): instances of their own (SAMPLE = true, with the ring) whose
// Argmax draws the token on its SM (ops/sample.cuh) and, with flags, whose LmHead stores the logits flagged; the greedy
// instances are compiled exactly as before.
// Stop ids (issue 5, isa.h StopIds, MkParams::stop): instances of their own (STOP = true, with the ring) in which
// every block checks a step's input token before its first instruction of the step (common.cuh step_check) and leaves
// when it is a stop id; the loader then drains (ring.cuh). The instances without STOP compile as before: the stop code
// inside them cost the sampled flag instance +8 B of spills and its step 1.034 -> 1.049 ms (H200, 1B, ctx 32).
// ptxas spill stores of the STOP instances (counters / flags, greedy; sampled): 28 / 224; 132 / 252 B. Measured
// (bench/RESULTS.md "EOS/stop check"): with stop ids 1B +0.15% at ctx 32 (flags), +0.8% at 4096 (counters).
// Version 13 (session 13, bench/RESULTS.md "Session 13: the megakernel's long-context step" and the two sections after
// it): split attention's merge through a shared-memory stage in SPLIT instances of the flag protocol (greedy, with and
// without stop ids; ops/attention.cuh attn_merge_split: the group's chunk records polled into s_x with every load in
// flight, then merged there -- v7-v12 read each value from L2 where used, a chain of dependent round trips, 6.6 us per
// AttnOProj with flags at ctx 4096), no inline-attention code in them; flags by default for split attention with
// chunks of at most 512 positions. Measured (H200, 1B, ABBA vs HEAD 34c08c2): ctx 4096* 1.170 vs 1.211 ms/token
// (-3.4%); ctx 32, 16384* (counters, chunks of 1032) and 8B unchanged (the other instances' code is HEAD's). Tried
// and not kept: the staged merge in every instance (its out-of-line call or inlined code raised the counter
// instance's ptxas spill stores 28 -> 116-220 B: counters +4%, 8B +1.2%), and an L2 prefetch of each chunk's K/V
// before the wait (+0.4% / +3.7%). The split attention's loop itself is ~90% instruction-bound (a build without its
// K/V loads was only 4% / 12% faster at 4096* / 16384*): 13 / 33 us per layer, the bulk of the long-context cost.
// Version 14 (session 13 mk9, bench/RESULTS.md "the split-attention loop in parallel phases" and the closing call): the
// SPLIT instances' AttnPartial computes its chunk in tiles of parallel phases (ops/attention.cuh attn_split, attn_short's
// scheme: scores per position for every q head, a warp per head's running softmax, P.V over warps), the record
// unchanged; split attention publishes with flags at every chunk length (1B ctx 4096* 1.169 -> 1.123 ms/token, 16384*
// 1.587 either way). The other instances keep attn_range. Session 17: attn_split replaced by attn_mma (ops/attn_mma.cuh:
// per-warp 16-key tiles on mma.sync, no block barrier per tile; 1B ctx 16384* 1.608 -> 1.270 ms/token, 4096* -4%).
// Session 17 too: sampled flag launches with split attention run SPLIT instances of their own (they ran attn_range
// for the chunks, other arithmetic than the greedy forward's), and the flag instances without split attention leave
// out the split code (INLINE): the greedy one 303 -> 231 KB of SASS, spill stores 220 -> 8 B; the sampled one 405 ->
// 335 KB, 244 -> 172 B (scripts/interpreter_size.sh). Measured in session 18 (bench/RESULTS.md call 1): 1B ctx 32
// -4.3%, Qwen3 -5%, 8B -3.5%; sampled 4096* / 16384* 1.377 / 1.763 -> 1.196 / 1.350 ms/token.
// Version 18 (session 18): MlpGateUp in two phases under the flag protocol (ops/mlp.cuh: each SM sums its slice of the
// mid residual, then polls it whole; 1B ctx 32 0.860 -> 0.815 ms/token, 8B 4.735 -> 4.581), head dim 128's split
// attention in pairs of warps (ops/attn_mma.cuh), Qwen3's q/k norm weights loaded at once (Qwen3 -1.3%).
// Version 25 (session 25): the mid-layer residual accumulated in L2 under the flag protocol (isa.h mid_acc_word:
// QkvProj's resid slice and each AttnOProj's rows added by relaxed 64-bit atomics of fixed-point words that count
// their contributions; MlpGateUp polls one vector, one dependency point instead of version 18's two): 1B ctx 32
// 0.796 -> 0.775 ms/token, 4096* 0.984 -> 0.955, 8B 4.19 -> 4.12, Qwen3-0.6B unchanged (bench/RESULTS.md call 3).
// Version 27 (session 27): QkvProj and MlpGateUp on one inlined body (ops/norm_matvec.cuh): one copy of the input /
// norm / page loop in the per-layer code, whose instruction fetch is ~4-5% of the stall samples (bench/RESULTS.md
// session 27 calls 5-6): Qwen3-0.6B / 1.7B -1.2% / -2.1%, the Llama shapes within +-0.3%.
// Session 28: the ring matvec's FMA loop in 4-weight steps (ring_page_matvec: no selects for the x swizzle): -0.9% (8B)
// to -1.9% (Qwen3-0.6B) at every shape. Probes of that session (scripts/probe_builds.sh): with no dependency point
// ever waiting the 1B step is still 0.703 ms/token, without the dot products 0.723, without both 0.644 (HEAD 0.773).
// Session 29: MlpDown's pages of one row pair (1B, Qwen3-1.7B) or one row (8B) split by columns over 4 warps
// (ring.cuh xb_split_part; 8B -0.8%), and AttnOProj's q/k/v polled in groups of 4 pairs all in flight (ops/attention.cuh
// attn_prepare: each thread polled its elements one after the other; -0.15..-1.2% at every shape). Measured not to pay
// (bench/RESULTS.md session 29): an L2 prefetch of MlpGateUp's pages while its gate is shut (the pages come from the
// L2, but the dependency points' polls in that window slow more than the pages gain), out-of-line poll loops (+35%:
// no calls in this kernel, not even on slow paths), and poll or norm forms that added ~15 KB of per-layer code
// (session 30's probes then showed code that never runs costs nothing measurable: those forms lost by what they ran).
// Session 30: the ring's slot and phase kept as the pages go by (ring.cuh next_page / RingPos) instead of a division
// by the run-time page count on every page: -0.2% (8B) to -1.2% (Qwen3-0.6B), the sampled instance +1.4% at 1B
// (two registers where the page count was one). Measured not to pay: 4 rows per warp, pairs split over 2-8 warps
// (ring_page_matvec's comment).
// Session 31: the f32-x ring matvec with four independent FFMA sums per row (ring.cuh: 1B -0.5%, sampled -2.2%) and
// attn_prepare's norm / RoPE / rounding / append in one warp-per-head pass (ops/attention.cuh attn_head_pass: Qwen3
// -0.5..-0.7%). Measured not to pay (bench/RESULTS.md session 31): four sums in MlpDown's and the narrow pages (+0.6%),
// the f32-x loop unrolled 8 (+1%), attn_short's softmax folded into its score phase (chunk maxima; +2.3% at 1B).
// Session 32: inline attention of short contexts on the tensor cores from a flat stage of 16-key tiles (ops/attn_flat.cuh,
// out of line as attn_mma_call) wherever attn_short's stage holds [0, pos] in whole tiles: 1B -2.4%, Qwen3-0.6B -8.4%,
// Qwen3-1.7B -4.7%, 8B -0.3% (its stage holds 4 tiles). Measured not to pay: AttnOProj's q/k/v polled per head without
// the block barrier (noise), attn_flat's merge over the streams with a tile only (Qwen3-0.6B +1.2%).
#include "megakernel/device/interpreter.h"

#include <type_traits>

#include "megakernel/device/ops/attention.cuh"
#include "megakernel/device/ops/lm_head.cuh"
#include "megakernel/device/ops/mlp.cuh"
#include "megakernel/device/ops/norm_matvec.cuh"

namespace mk::megakernel::device {

namespace {

// Dynamic shared memory: params.cuh (BAR_BYTES).
__host__ __device__ size_t ring_offset(const MkParams& p) {
  const size_t floats = size_t(p.smem_x_floats + p.smem_aux_floats + RED_FLOATS);
  return (BAR_BYTES + floats * sizeof(float) + 127) / 128 * 128;
}

// The consumers leave at a step_check that did not return 1: r = 2 (a stop id) tells the loader (ring.cuh s_stop);
// each thread's early cp.async loads of the step's first instruction land first (r = 0: the watchdog, as before).
__device__ __forceinline__ void stop_block(int r) {
  if (r != 2) return;
  cp_async_wait_all();
  if (threadIdx.x == 0) *reinterpret_cast<volatile int*>(&s_stop) = 1;
}

}  // namespace

// SPLIT (flag protocol with split attention, session 13): AttnOProj merges the chunk partials through the merge stage
// (ops/attention.cuh attn_merge_split) and the inline attention paths are not compiled; the other instances keep their
// code.
template <bool RING, bool FLAG, bool SAMPLE, bool STOP, bool SPLIT = false>
__global__ void __launch_bounds__(THREADS, 1) megakernel_kernel(const __grid_constant__ MkParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Flag launches without split attention (launch_megakernel): one attention chunk, so no AttnPartial and no merge of
  // chunk records -- that code is left out of these instances.
  constexpr bool INLINE = FLAG && !SPLIT;
  // An earlier launch of this generate call chose a stop id (isa.h StopIds): nothing to run. Every thread reads the
  // same word (only earlier launches wrote a value in [call_seq, launch_seq)), so the whole block leaves together.
  if constexpr (STOP)
    if (*reinterpret_cast<volatile const uint32_t*>(p.stop_state + 1) - p.call_seq < p.launch_seq - p.call_seq) return;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_raw);
  uint64_t* empty = full + MAX_PAGES;
  float* smem = reinterpret_cast<float*>(smem_raw + BAR_BYTES);
  float* s_red = smem + p.smem_x_floats + p.smem_aux_floats;
  unsigned char* ring = smem_raw + ring_offset(p);
  if (threadIdx.x == 0) {
    s_lm_gate = 0;  // the dynamic LM head's gate (ring.cuh): no LmHead entered in this launch yet
    s_gate = 0;     // the prefetch gate (ring.cuh): no gated instruction's input read yet
    if constexpr (STOP) s_stop = 0;  // the consumers have not stopped (ring.cuh)
    for (int s = 0; s < p.n_pages; ++s)
      mbar_init(&full[s], 1), mbar_init(&empty[s], WARPS);
    // The split pages' arrival counters (ring.cuh xb_split_part): zero before a slot's first page.
    for (int s = 0; s < MAX_PAGES; ++s) split_count(s_red)[s] = 0;
    // Make the initialised barriers visible to the async proxy (the bulk copies complete on them).
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mk::cuda::fence_proxy_async();
  }
  __syncthreads();  // the only block-wide barrier: from here on the loader and consumers run apart
  unsigned long long* blk = p.timing ? p.timing + size_t(p.n_instr) * TIMING_FIELDS + size_t(blockIdx.x) * BLOCK_FIELDS : nullptr;
  if (threadIdx.x >= NCT) {
    if (RING) run_loader<STOP>(p, ring, full, empty);
    return;
  }
  if (blk && threadIdx.x == 0) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    blk[B_START] = global_ns(), blk[B_SMID] = smid;
  }
  const uint32_t begin = p.queue_begin[blockIdx.x], end = p.queue_begin[blockIdx.x + 1];
  Ctx c{p, smem, smem + p.smem_x_floats, s_red, ring, full, empty, 0, 0, 0, 0, false, false, -1, 0, 0, false};
  for (int step = 0; step < p.n_steps && begin < end; ++step) {
    c.step = step, c.pos = p.pos0 + step, c.synced = false;
    // Stop ids (isa.h StopIds): the check of the step's input token sits before the block's first instruction of the
    // step, after its early loads -- with the flag protocol's step barrier, which every block passes there anyway,
    // and with counters before the first dependency wait (common.cuh step_check says why neither adds a round trip).
    // Every instruction of step s transitively needs tokens[s] (layer 0 embeds it), so no block could do any of the
    // step's work before the Argmax of step s - 1 anyway; a block that stopped has written nothing of the step, and
    // the loader (which ran ahead into it) drains its copies and leaves (ring.cuh s_stop).
    const bool check_stop = STOP && step > 0;
    const uint32_t epoch = p.epoch0 + uint32_t(step);
    c.epoch = epoch;
    for (uint32_t i = begin; i < end; ++i) {
      const Instr in = p.instrs[i];
      c.instr = i;
      unsigned long long* t = (p.timing && threadIdx.x == 0) ? p.timing + size_t(i) * TIMING_FIELDS : nullptr;
      if (t) t[T_WAIT_START] = global_ns(), c.page_wait = 0, c.matvec_start = 0;
      // Loads that do not depend on this step's producers go out before the wait (MkParams::prefetch):
      // the norm weights, and for attention the block table and the cached K/V (attn_preload says why
      // that is safe). They land while thread 0 polls, so after the wait one L2 round trip remains.
      c.staged = false, c.at_pos = -1, c.rope_ready = false;
      if (p.prefetch) {
        switch (in.op) {
          case Op::QkvProj:
          case Op::MlpGateUp: prefetch_norm(c, input_norm(p, in)); break;
          case Op::LmHead: prefetch_norm(c, input_norm(p, in)); break;  // a case of its own: the SASS stays as measured
          case Op::AttnPartial:
            if constexpr (!INLINE) attn_preload<FLAG, SPLIT>(c, in);
            break;
          case Op::AttnOProj:
            if (!SPLIT && p.L.n_chunks == 1) attn_preload<FLAG>(c, in);
            break;
          default: break;
        }
      }
      // A greedy launch's SamplePartial (isa.h): nothing to do and nothing to wait for; with counters it signals.
      const bool skip = !SAMPLE && in.op == Op::SamplePartial;
      if constexpr (FLAG) {
        // No counter wait: the op polls its inputs (the timestamps' "prep" then includes that wait). The
        // step barrier before the block's first instruction of a step (params.cuh).
        const uint32_t target = (p.step_base + uint32_t(step)) * uint32_t(p.n_active);
        if constexpr (STOP) {
          if (i == begin) {  // the step barrier and the stop check
            const int r = step_check<true>(p, target, check_stop ? step : -1, epoch, i);
            if (r != 1) return stop_block(r);
          }
        } else if (i == begin && !step_acquire(p, target, i)) {
          return;
        }
        c.synced = true;
      } else {
        if (check_stop && i == begin) {
          const int r = step_check<false>(p, 0, step, p.tag0 + uint32_t(step), i);
          if (r != 1) return stop_block(r);
        }
        if (!skip && !wait_deps(p, in, epoch, i)) return;  // watchdog: p.error says where
        c.synced = c.synced || (!skip && in.n_waits > 0);  // as the simulator's check of the preload (sim.cpp)
      }
      if (t) t[T_WAIT_END] = global_ns();
      if (skip) {
        if constexpr (!FLAG) signal(p, in.signal);
        if (t) t[T_COMPUTE_END] = t[T_SIGNAL_END] = t[T_WAIT_END], t[T_PAGE_WAIT] = 0, t[T_MATVEC_START] = 0;
        continue;
      }
      switch (in.op) {
        case Op::QkvProj:
        case Op::MlpGateUp: op_norm_matvec<RING, FLAG, STOP>(c, in); break;
        case Op::AttnPartial:
          if constexpr (!INLINE) op_attn_partial<FLAG, SPLIT>(c, in);
          break;
        case Op::AttnOProj: op_attn_o_proj<RING, FLAG, SPLIT, INLINE>(c, in); break;
        case Op::MlpDown: op_mlp_down<RING, FLAG>(c, in); break;
        case Op::LmHead: op_lm_head<RING, FLAG, SAMPLE>(c, in); break;
        case Op::SamplePartial:
          if constexpr (SAMPLE) op_sample_partial<FLAG>(c, in);
          break;
        case Op::Argmax:
          op_argmax<FLAG, SAMPLE>(c, in);
          if (STOP && threadIdx.x == 0) put_stop_state<FLAG>(p, step);
          break;
        default: break;
      }
      if (t) t[T_COMPUTE_END] = global_ns(), t[T_PAGE_WAIT] = c.page_wait, t[T_MATVEC_START] = c.matvec_start;
      if constexpr (FLAG) {
        // The op's shared memory is free for the next instruction's early loads. (After a watchdog error the
        // polls give up at once, so the block runs out its queue quickly; no early exit, which could leave
        // some consumer threads waiting at a named barrier the others no longer reach.)
        csync();
      } else {
        signal(p, in.signal);
      }
      if (t) t[T_SIGNAL_END] = global_ns();
    }
    if constexpr (FLAG) step_release(p);
  }
  if (blk && threadIdx.x == 0) blk[B_END] = global_ns();
}

size_t smem_bytes(const MkParams& p) { return ring_offset(p) + size_t(p.n_pages) * PAGE_BYTES; }

size_t smem_bytes_without_ring(int smem_x_floats, int smem_aux_floats) {
  MkParams p{};
  p.smem_x_floats = smem_x_floats, p.smem_aux_floats = smem_aux_floats;
  return ring_offset(p);
}

cudaError_t launch_megakernel(const MkParams& p, int n_sm, cudaStream_t stream) {
  const size_t smem = smem_bytes(p);
  // The flag protocol, sampled launches and stop ids run with the weight ring only (the backend refuses them otherwise).
  const bool sample = p.sample.temperature > 0.f, stop = p.stop.n > 0;
  if ((p.flags || sample || stop) && p.n_pages == 0) return cudaErrorInvalidValue;
  // Sampled launches and launches with stop ids have instances of their own, so the others keep their code (and
  // registers) unchanged.
  // Flag launches with split attention (greedy or sampled, with or without stop ids) run the SPLIT instances.
  const bool split = p.L.n_chunks > 1;
  auto pick = [&](auto stop_tag) -> const void* {
    constexpr bool S = decltype(stop_tag)::value;
    return sample ? (p.flags ? (split ? reinterpret_cast<const void*>(megakernel_kernel<true, true, true, S, true>)
                                      : reinterpret_cast<const void*>(megakernel_kernel<true, true, true, S>))
                             : reinterpret_cast<const void*>(megakernel_kernel<true, false, true, S>))
                  : (p.flags ? (split ? reinterpret_cast<const void*>(megakernel_kernel<true, true, false, S, true>)
                                      : reinterpret_cast<const void*>(megakernel_kernel<true, true, false, S>))
                             : reinterpret_cast<const void*>(megakernel_kernel<true, false, false, S>));
  };
  const void* kernel = stop            ? pick(std::true_type{})
                       : p.n_pages > 0 ? pick(std::false_type{})
                                       : reinterpret_cast<const void*>(megakernel_kernel<false, false, false, false>);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  void* args[] = {const_cast<MkParams*>(&p)};
  return cudaLaunchCooperativeKernel(kernel, dim3(n_sm), dim3(THREADS), args, smem, stream);
}

}  // namespace mk::megakernel::device
