// Kernel parameters of the megakernel interpreter and the per-block context its ops see.
// Weights are in the layered path's device layout (cuda/backend/device_weights.h) and the KV cache in
// the paged layout of cuda/attention/attention.h (cuda/backend/kv_cache.h), so both paths share them.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "megakernel/isa.h"

namespace mk::megakernel::device {

using bf16 = __nv_bfloat16;

// One block of 384 threads per SM: warps 0..10 are consumers (wait, compute, publish), warp 11 is the
// weight loader (ring.cuh). Consumers synchronise among themselves with named barrier 1 (csync), never
// with __syncthreads, so the loader can run ahead independently.
// 11 consumer warps since session 19 (15 before): at 512 threads the kernel's 128 registers per thread made every new
// poll form spill into the hot loops (+11..30%); at 384 it has 168 and the instances spill little or nothing. With the
// act vector's packed poll (ops/mlp.cuh) the H200 measured, against 15 warps (bench/RESULTS.md session 19 call 6): 1B
// ctx 32 +0.3%, 8B -1.5%, Qwen3-0.6B -0.9%, 1B ctx 4096* -3.3%.
constexpr int THREADS = 384;
constexpr int WARPS = 11;           // consumer warps
constexpr int NCT = WARPS * 32;     // consumer threads
constexpr int LOADER_WARP = WARPS;  // the weight loader
constexpr int PAGE_BYTES = 32768;   // one ring page: whole weight rows (a row must fit in a page)
constexpr int MAX_PAGES = 8;
// A ring page that holds a single row pair of MlpDown (1B, Qwen3-1.7B: two 16 / 12 KB rows; 8B: one 28 KB row) is
// split by columns over XB_SPLIT consumer warps, whose partial sums meet in shared memory (ring.cuh xb_split_part):
// one warp took the whole page before, so each layer's MlpDown ended a page's compute after its last page landed
// (session 29: its "publish" 24 -> 12 us per SM per step at 1B; 8B -0.8%, the other shapes within +-0.3%; 8 warps
// no better than 4).
constexpr int XB_SPLIT = 4;
// The consumers' reduction scratch after s_aux: [RED_BLOCK] for block reductions (s_red), then the split pages'
// partials [MAX_PAGES][2][XB_SPLIT] floats (split_part) and their arrival counters [MAX_PAGES] ints (split_count).
constexpr int RED_BLOCK = 64;
constexpr int RED_FLOATS = RED_BLOCK + MAX_PAGES * (2 * XB_SPLIT + 1);
__device__ __forceinline__ float* split_part(float* s_red, uint32_t slot) { return s_red + RED_BLOCK + slot * (2 * XB_SPLIT); }
__device__ __forceinline__ int* split_count(float* s_red) {
  return reinterpret_cast<int*>(s_red + RED_BLOCK + MAX_PAGES * (2 * XB_SPLIT));
}
// Positions per KV cache block (cuda::KV_BLOCK_SIZE; the backend checks): a constant, so that kv_offset's division is
// a shift -- it runs once per 16-byte K/V copy.
constexpr int KV_BLOCK = 64;

// Rows of `cols` bf16 per ring page: whole rows, an even number when two fit (consumers take rows in pairs). The
// backend sizes the dynamic LM head's units with it (isa.h Layout::lm_unit_rows: one unit = one page).
__host__ __device__ __forceinline__ int page_rows(int cols) {
  const int rpp = PAGE_BYTES / (2 * cols);
  return rpp >= 2 ? rpp & ~1 : 1;
}

// How an instruction publishes its writes (common.cuh signal) and how a wait orders the reads after it
// (wait_deps): red.release.gpu (a release with fence.acq_rel strength, which PTX defines as enough for the
// release pattern), and the waiter relies on ld.acquire + bar.sync alone (no fence after the poll). Measured
// fastest of the three schemes of version 5 (fence.sc + atomicAdd, and a fence after the waiter's poll, were
// removed in version 9). Why that is enough (PTX memory model): a producer's stores precede its
// bar.sync, which synchronizes with thread 0's, whose red.release is then cumulative over them; the
// waiter's ld.acquire.gpu reads that value (synchronizes-with), precedes its bar.sync in program order,
// and bar.sync synchronizes with the other consumer warps' bar.sync, which precede their loads. Base
// causality order is transitive over program order and synchronizes-with, so every store precedes every
// later load in causality order and the load cannot return an older value. The loads of activations are
// ld.global.cg (L2, the point of coherence), and the K/V cache positions < pos read before a wait are
// covered by an earlier wait of the same step (ops/attention.cuh attn_preload). The K/V append of step s
// is read by other SMs only at step s + 1, after the counter chain through step s's Argmax.

// One layer's weights and KV pools (device pointers).
struct MkLayer {
  const float* attn_norm;  // [n_embd]
  const bf16* wqkv;        // [q_dim + 2 kv_dim, n_embd]  rows of wq, wk, wv
  const float* bqkv;       // [q_dim + 2 kv_dim] or null
  const float* q_norm;     // [head_dim] or null
  const float* k_norm;     // [head_dim] or null
  const bf16* wo;          // [n_embd, q_dim]
  const float* mlp_norm;   // [n_embd]
  const bf16* w_gate_up;   // [2 n_ff, n_embd]  gate row r at 2r, up row r at 2r + 1
  const bf16* w_down;      // [n_embd, n_ff]
  bf16* k_cache;           // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  bf16* v_cache;           // same
};

// Per-instruction timestamps (MkParams::timing, globaltimer ns), the last step of a launch:
// [flat instruction index][TIMING_FIELDS].
// T_MATVEC_START: the first matvec page (what comes before is the op's preparation: residual sum, norm,
// attention); 0 for ops without weights.
// T_PREP1 / T_PREP2: attention ops: q/k/v loaded + RoPE + append done; attention over the cache done. QkvProj and
// MlpGateUp: the residual's inputs polled and summed (every thread's, after a barrier); the RMSNorm done.
// T_ATT_KV (attention ops): thread 0's staged K/V copies landed (attn_range: before the first score; attn_short:
// every thread's, after the barrier that follows them); attn_mma: thread 0's stream has computed its last tile.
// T_LOADER_STALL: ns the loader waited for a free ring slot before issuing this instruction's pages (the ring was
// full of earlier pages), written by the loader.
enum TimingField { T_WAIT_START = 0, T_WAIT_END, T_COMPUTE_END, T_SIGNAL_END, T_PAGE_WAIT, T_MATVEC_START, T_PREP1, T_PREP2, T_ATT_KV,
                   T_LOADER_STALL, TIMING_FIELDS };
// After the instructions, per block [BLOCK_FIELDS]: loader ns stalled on a full ring (whole launch),
// kernel start, kernel end (ns), the SM it ran on (%smid).
enum BlockTimingField { B_LOADER_STALL = 0, B_START, B_END, B_SMID, BLOCK_FIELDS };

// Flag-in-data publishing (MkParams::flags, isa.h "Publishing"): an activation element is the pair
// (value bits, epoch) in one 8-byte word, written with one st.relaxed.gpu.b64 and read with ld.relaxed.gpu
// (an 8-byte access is single-copy atomic, so a reader sees either the old pair or the new one, never half);
// a reader polls until the epoch is its step's. No fence on either side: a release would wait for this
// SM's in-flight bulk copies (research/sync-bubbles.md lesson 2). The K/V cache (plain bf16) is ordered by
// the step barrier: a block's thread 0 increments `step_counter` with red.release.gpu after the block's last
// instruction of a step (a barrier first: cumulative over all its threads' writes), and polls it with
// ld.acquire.gpu, then a barrier, before the block's first instruction of the next step -- the
// PUBLISH_RELEASE_NOFENCE_WAIT argument above. So every access of step s + 1 happens after every access of
// step s, which also covers the next step's overwrites of flagged buffers (write-after-read).
constexpr uint32_t FLAG_WATCHDOG_COUNTER = 0xffffffffu;  // MkParams::error[3] of a flag poll that timed out

struct MkParams {
  const Instr* instrs;          // all queues back to back
  const uint32_t* queue_begin;  // [n_sm + 1] offsets into instrs
  const MkLayer* layers;        // [n_layer]
  const bf16* tok_embd;         // [n_vocab, n_embd]
  const bf16* lm_head;          // [n_vocab, n_embd]
  const float* final_norm;      // [n_embd]
  const float* inv_freq;        // [head_dim / 2]
  const int32_t* block_table;   // [kv_n_blocks] positions -> pool blocks (KV_BLOCK positions each)
  float* ws;                    // fp32 workspace, offsets in `L`
  int32_t* tokens;              // [n_steps + 1]: tokens[s] is step s's input
  uint32_t* counters;           // [L.n_counters] monotonic, never reset
  uint32_t* error;              // [4]: code (1 = watchdog), block, instruction, counter
  unsigned long long* timing;   // null = off; else [n_instr][TIMING_FIELDS] then [n_sm][BLOCK_FIELDS]
  uint32_t n_instr;             // instructions of all queues (timing index of the block fields)
  Layout L;
  float eps;
  uint32_t epoch0;              // epoch of step 0 of this launch
  int pos0;                     // position of step 0
  int n_steps;
  long long watchdog_cycles;    // a wait longer than this is an error, not a hang
  int n_pages;                  // weight ring pages (0 = no ring: consumers load weights directly, v2)
  int rope_early;               // 1 (with prefetch): the RoPE cos/sin of pos computed before the dependency wait
  int prefetch;                 // 1: issue the loads that do not depend on this step's producers (norm
                                // weights, K/V cache positions < pos, block table) before the dependency wait
  int smem_x_floats;            // shared memory plan (floats): s_x, then s_aux, then s_red, then the ring
  int smem_aux_floats;
  // Flag protocol (flags = 1; the kernel is then the FLAG instance): pairs instead of ws / tokens.
  int flags;
  unsigned long long* fws;      // [L.workspace_floats] (float bits | epoch << 32), same offsets as ws (not logits)
  unsigned long long* ftokens;  // [n_steps + 1] (token | epoch << 32): ftokens[s] is step s's input
  uint32_t* step_counter;       // one counter: + n_active per step
  uint32_t step_base;           // flag-protocol steps completed before this launch
  int n_active;                 // blocks with a non-empty queue (the others return at once)
  // Version 9: inline attention of short contexts (ops/attn_short.cuh) while pos < attn_short_max (0 = never:
  // attn_range for every position); its K/V stage in s_x holds positions [0, attn_stage).
  int attn_short_max;
  int attn_stage;
  // Session 32: of those, the steps with pos < 16 attn_flat_tiles take the tensor-core path from a flat stage of
  // that many 16-key tiles (ops/attn_flat.cuh); 0 = attn_short always.
  int attn_flat_tiles;
  // Session 17: the SPLIT instances' AttnPartial on the tensor cores (ops/attn_mma.cuh) with this many consumer warps
  // streaming tiles (MegakernelOptions::attn_mma_warps; at least 1 wherever a SPLIT instance runs).
  int attn_mma_warps;
  // Version 10: the dynamic LM head (isa.h Layout::lm_unit_rows; ring.cuh loader_lm_dynamic, ops/lm_head.cuh): 1 on
  // (needs the ring and a schedule with units). lm_claim: the monotonic claim counter; lm_base: its value at
  // this launch's start (the host counts every dynamic step's L.lm_claims_per_step()).
  int lm_dynamic;
  unsigned long long* lm_claim;
  unsigned long long lm_base;
  // Sampling of this launch (isa.h SampleParams; temperature 0 = greedy): the Argmax instruction draws instead
  // (ops/sample.cuh), and with flags LmHead stores the logits flagged.
  SampleParams sample;
  // Stop ids of this launch (isa.h StopIds; stop.n = 0: none, and nothing below is read or written). The Argmax also
  // stores its token flagged in the counter instance (ftokens, tag tag0 + step + 1), every block checks the step's
  // input token before its first instruction of a step >= 1 (interpreter.cu), and a launch of a generate call after
  // the one that chose a stop id runs nothing.
  StopIds stop;
  uint32_t* stop_state;  // [2]: [0] tokens the generate call produced so far (the Argmax writes produced_base + step + 1);
                         // [1] launch_seq of the last launch that chose a stop id
  uint32_t launch_seq;   // this launch's number (> 0, one per launch)
  uint32_t call_seq;     // launch_seq of its generate call's first launch: stop_state[1] in [call_seq, launch_seq) means
                         // an earlier launch of the call stopped, and this one returns at once
  int produced_base;     // tokens produced by the call's launches before this one (when none stopped)
  uint32_t tag0;         // epoch tag of ftokens[0] (the backend's total step count; the flag instance: = epoch0)
  // Session 14: gated prefetch (ring.cuh loader_gate). > 0: the loader issues at most this many pages of a MlpDown or
  // QkvProj instruction before the block's consumers have read that instruction's whole input (ops/mlp.cuh,
  // ops/norm_matvec.cuh: gate_open), i.e. before the stage before it ended on every SM; 0: no gate (MegakernelOptions).
  int gate_pages;
  // Session 20: MlpGateUp's own gate, used instead of gate_pages (the backend's gate_up_gate(): gate_pages plus its extra
  // pages, or MegakernelOptions::gate_pages_gate_up), so that with a deeper ring more of its pages can land during the
  // attention before it without the other stages' gates moving.
  int gate_pages_gu;
};

// Dynamic shared memory: [2 * MAX_PAGES mbarriers][s_x][s_aux][s_red RED_FLOATS][pad to 128 B][ring pages] (interpreter.cu).
constexpr size_t BAR_BYTES = 2 * MAX_PAGES * sizeof(uint64_t);

// attn_short's scratch in s_aux (ops/attn_short.cuh), from the start of attn_range's s_o for a group of G <= 8 q
// heads of head_dim hd: `region` floats (s_o, s_m, s_s, s_wp), holding the scores [G][n32] (n32: positions
// rounded up to 32) and later the warp partials [WARPS][G][hd]; the k, v of pos as bf16 at pos_off (hd floats,
// 16-byte aligned); the G sums at sum_off. max_n: the positions the scores may hold (a multiple of 32).
struct AttnShortPlan {
  int region, pos_off, sum_off, max_n;
};
__host__ __device__ __forceinline__ AttnShortPlan attn_short_plan(int G, int hd) {
  AttnShortPlan a;
  a.region = G * hd + 2 * G + WARPS * G * (hd + 2);
  a.sum_off = a.region - 8;
  a.pos_off = (a.sum_off - hd) & ~3;  // >= WARPS * G * hd: the partials stay clear of it
  a.max_n = (a.pos_off / G) & ~31;
  return a;
}

// The split attention's merge stage (session 13; ops/attention.cuh attn_merge_split): where AttnOProj copies its
// group's chunk partials in s_x (floats), past the G * hd merged outputs that its O projection reads from s_x[0, G * hd).
__host__ __device__ __forceinline__ int merge_stage_offset(int G, int hd) { return (G * hd + 3) / 4 * 4; }

// Session 17, ops/attn_mma.cuh: split attention's tiles on the tensor cores.
constexpr int MMA_TK = 16;  // keys per tile (the mma's k for P V)
// Ring stages per warp (stream): all issued before the dependency wait, then one refilled per computed tile. More
// stages leave room for fewer streams, and a stream's per-tile compute chain is what bounds the loop (H200, 1B ctx
// 16384*: 10 warps x 2 stages 1.270 ms/token, 6 x 3 1.288, session 17 call 3; head dim 64 with 4 stages, 5 streams:
// +3% at 4096*, +7% at 16384*, session 26 call 3).
constexpr int MMA_NS = 2;
__host__ __device__ constexpr int attn_mma_stage_bytes(int hd) { return 2 * MMA_TK * hd * 2; }  // K + V tile, bf16
// Warps whose MMA_NS stages fit in s_x (at most WARPS); MkParams::attn_mma_warps is at most this.
__host__ __device__ inline int attn_mma_fit(int smem_x_floats, int hd) {
  const int w = int(size_t(smem_x_floats) * 4 / size_t(MMA_NS * attn_mma_stage_bytes(hd)));
  return w < WARPS ? w : WARPS;
}

// What an op needs while it runs on one block (each consumer thread has its own copy).
struct Ctx {
  const MkParams& p;
  float* s_x;    // [smem_x_floats]   the op's input vector (normed activations)
  float* s_aux;  // [smem_aux_floats] op scratch
  float* s_red;  // [RED_FLOATS] reductions (params.cuh RED_FLOATS)
  unsigned char* ring;  // [n_pages][PAGE_BYTES]
  uint64_t* full;       // [n_pages] mbarriers: page landed (tx bytes)
  uint64_t* empty;      // [n_pages] mbarriers: page released by all consumer warps
  int step, pos;
  uint32_t epoch;                    // this step's epoch (flag tags)
  uint32_t instr;                    // index of the current instruction (watchdog report)
  mutable bool synced;               // a dependency wait of this step has passed (see attn_preload)
  mutable bool staged;               // attn_preload put this thread's first K/V loads into the stage
  mutable int64_t at_pos;            // attn_preload: cache offset of (pos, group), -1 = not computed
  mutable unsigned long long page_wait;  // ns warp 0 waited for pages (timing only)
  mutable unsigned long long matvec_start;  // ns, first matvec of the instruction (timing only)
  mutable bool rope_ready;           // attn_preload filled the RoPE table (ops/attention.cuh attn_rope_table)
  // This warp's next ring page (same sequence as the loader's): its slot, page % n_pages, and the parity of page /
  // n_pages, kept as the pages go by (ring.cuh next_page) -- a division by the run-time page count on every page cost
  // each warp a dependent chain of ~20 instructions (session 30).
  mutable uint32_t slot = 0, phase = 0;
};

}  // namespace mk::megakernel::device
