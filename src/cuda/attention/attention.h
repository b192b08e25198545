// Exact attention on the GPU (bf16 in, fp32 accumulation, bf16 out): prefill over variable-length batches,
// split-KV decode, and the KV-cache append, all over one paged KV-cache layout (below).
// CPU reference with the same names and argument order: src/cpu/attention_ref.h (float64).
// Tests: tests/gpu/test_attention.cu (build/test_gpu --gtest_filter='Attention*'); benchmark: bench/attention.cpp.
//
// Paged KV cache (one per layer; K and V pools have the same shape):
//   k, v         [kv_n_blocks, kv_block_size, n_kv_head, head_dim]   bf16, row-major, 16-byte aligned
//   block_table  [batch, max_blocks_per_seq]                         int32, device
// Position p of sequence b lives in pool block block_table[b * max_blocks_per_seq + p / kv_block_size], row
// p % kv_block_size. One token's K (all heads) is contiguous, so an append is one 16-byte-vector store per
// (head, 8 dims); a head's rows within a block are strided by n_kv_head * head_dim elements (TMA-friendly: a
// 2-D box of [rows, head_dim] per head). kv_block_size must be a multiple of KV_BLOCK_ALIGN (64), so that a
// kernel's 64-key tile never straddles two blocks.
//
// Lengths: seq_lens_k[b] is the number of valid cached positions of sequence b (the new tokens of this step
// included: append first, then attend). Queries are the LAST q_len positions of their sequence, so query i of a
// sequence with q_len queries and kv_len keys sits at position kv_len - q_len + i; the causal mask lets it see
// keys 0 .. kv_len - q_len + i (bottom-right aligned, as FlashAttention-2/3 for q_len <= kv_len).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mk::cuda {

using bf16 = __nv_bfloat16;

constexpr int KV_BLOCK_ALIGN = 64;  // kv_block_size must be a multiple of this

// One layer's paged KV pools. Pointers are device pointers.
struct KvCacheView {
  bf16* k = nullptr;  // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  bf16* v = nullptr;  // [kv_n_blocks, kv_block_size, n_kv_head, head_dim]
  int kv_n_blocks = 0;
  int kv_block_size = 0;  // positions per block, multiple of KV_BLOCK_ALIGN
  int n_kv_head = 0;
  int head_dim = 0;  // 64 or 128
  DType dtype = DType::BF16;  // element type of q, k, v, out: only BF16 is supported
};

// Which sequence owns which pool blocks. Entries are block indices in [0, kv_n_blocks).
struct BlockTableView {
  const int32_t* data = nullptr;  // [batch, max_blocks_per_seq], device
  int max_blocks_per_seq = 0;     // capacity of one sequence = max_blocks_per_seq * kv_block_size positions
};

// Switches of the prefill kernel (defaults are the fastest measured setting). The FA-4 techniques are
// switchable so that their effect can be measured (bench/attention.cpp --ablation).
enum class PrefillKernel : uint8_t {
  AUTO,    // HOPPER when the device is sm_90 and some sequence has more than simple_max_q queries, else SIMPLE
  SIMPLE,  // FA2-style tiled kernel (mma.sync, cp.async double buffer): the correctness baseline
  HOPPER,  // FA3-style: TMA ring on mbarriers, wgmma, producer warp + 2-3 consumer warpgroups (ping-pong)
};

struct AttentionOptions {
  PrefillKernel prefill_kernel = PrefillKernel::AUTO;
  // AUTO takes SIMPLE when max_seqlen_q is at most this: on short prompts the FA3-style kernel's start-up costs more
  // than its speed gains (H200, layered prefill of 8 / 32 / 128 tokens: -6..-10% / -10% / -1..-4% time to first
  // token with SIMPLE, 512 tokens +0..4%; bench/RESULTS.md, session 9).
  int simple_max_q = 128;
  // FA-4 (a): fraction of the softmax exponentials computed by a degree-3 polynomial exp2 on the FMA units
  // (the rest on the MUFU unit). Quantised to 0, 1/8, 1/4, 3/8, 1/2 or 1 of a tile's columns. 0 disables. Off by
  // default: on the H200 the Hopper kernel is not MUFU-bound, so every fraction > 0 measured slower (1/8: -8% at
  // head dim 64, -6% at 128; bench/RESULTS.md).
  float poly_exp2_fraction = 0.f;
  // FA-4 (b): rescale the running output only when the running max (log2 units) grows by more than
  // rescale_threshold; the final normalisation uses the max actually applied, so the result stays exact.
  // lazy_rescale = false rescales on every growth (FA-2/3 behaviour). Measured +4..7% non-causal, +0..2% causal.
  bool lazy_rescale = true;
  float rescale_threshold = 8.f;
  // HOPPER kernel: overlap the softmax of tile j with Q K^T of tile j and P V of tile j-1 inside a warpgroup.
  bool hopper_overlap = true;
  // HOPPER kernel: the consumer warpgroups take turns issuing their GEMMs (FA3 ping-pong, named barriers), so
  // that one's softmax runs under another's GEMMs. Off: they issue whenever ready.
  bool hopper_pingpong = true;
  // HOPPER kernel: consumer warpgroups of 64 query rows per CTA. 0 = the default per head dim (3 at 64, 2 at
  // 128); 2 or 3 at head dim 64, 2 at 128.
  int hopper_consumer_warpgroups = 0;
  // HOPPER kernel, causal: CTA order longest-processing-time first (the heaviest row blocks of every head in an
  // L2-sized group of heads first, the light ones last) instead of head after head. Non-causal launches always go
  // head after head (equal row blocks: the order only changes L2 reuse, which head after head keeps better).
  bool hopper_lpt_schedule = true;
  // Decode: number of KV splits per (sequence, kv head), 1 .. 1024; 0 chooses from max_seqlen_k, the batch
  // and the SM count.
  int decode_splits = 0;
  // Decode: launch with programmatic dependent launch (the kernel may start during the previous kernel of the
  // stream and waits with griddepcontrol.wait before its first global read).
  bool decode_pdl = true;
  // Decode: warps per CTA, 0 = default (4, 16 KB K+V tiles per warp step); 8 = eight warps with 8 KB tiles
  // (same shared-memory ring, more warps to hide latency). Measured in bench/attention.cpp decode.
  int decode_warps = 0;
  // Decode: CTAs per SM the shared-memory ring is sized for: 0 = default (1: 192 KB, 16 KB tiles per warp
  // step); 2 = 96 KB (half-size tiles), so that the next call's CTAs can be resident (PDL) while this call's
  // still run, and the split count is chosen for twice the CTA slots. Only with 4 warps.
  int decode_ctas_per_sm = 0;
  // Decode, a CONTRACT of the caller (default off): the kernel that precedes this call on the stream writes
  // neither seq_lens_k, nor the block table, nor any K/V row of a sequence but its newest (position
  // seq_lens_k[b] - 1, e.g. the row a fused append just wrote). Then the kernel reads those and starts
  // streaming the K/V tiles below the newest row before its PDL wait, under the previous kernel's tail; q, the
  // newest row and the workspace are touched only after the wait. Without PDL this changes nothing.
  // Measured (H200, batch 1): 32k -0.8..-1.4 us (head dim 128: 4.10 TB/s), 4k -0.4..-1.7 us.
  bool decode_early_kv = false;
  // Decode without that contract: before its PDL wait the kernel prefetches into L2 the first tiles of each
  // warp (addresses from seq_lens_k and the block table as they are then, clamped into the pools: a stale
  // value only wastes a prefetch, never changes a result; every value is re-read after the wait). 0 disables.
  // Measured (H200, batch 1, 32k): -0.5 us at head dim 64, -0.9 at 128; batch 8 / 64: +0.1..0.9%.
  int decode_l2_prefetch_tiles = 2;
  // Decode: combine the splits of a (sequence, kv head) inside a thread-block cluster (one cluster per kv head,
  // 2 .. 16 splits, 4 warps): each CTA keeps its partial in shared memory, a cluster barrier replaces the
  // global partials + fence + arrival counter, and every CTA combines a slice of the heads' outputs through
  // distributed shared memory. Falls back to the counter combine where the split count is outside 2 .. 16, with
  // 8 warps, or where the device cannot hold the clusters of one wave. Measured (H200, bench/RESULTS.md "Decode
  // attention v4"): it holds only 7 clusters of 16 one-SM CTAs, so batch 1 (8 kv heads x 16 splits) falls back
  // (= default); batch 8 x 32k (2 splits) -1.1% (d64) / -0.5% (d128); where clusters do run at batch 1 (8
  // splits, or 2 CTAs per SM) they pack into few GPCs and lose 25-50%. Hence off by default.
  bool decode_cluster_combine = false;
  // Decode with decode_early_kv: ring stages of each warp issued before the PDL wait, 1 .. 3 (3 = the whole
  // ring: 192 KB per CTA); 0 = the measured default: 2 with TMA tiles (decode_tma; 3 measured +0.15 us, 1 +0.5 us
  // at 32k batch 1: the PDL wait passes later the more bytes are queued before it), else 3 at head dim 64 with one
  // CTA per SM (no cluster combine), else 2. Measured (H200, bench/RESULTS.md "Decode attention v6"): 3 stages
  // of cp.async at head dim 64 -0.2 us at 32k batch 1, -0.5% at batch 8 x 32k and 64 x 4k; at head dim 128
  // +0.4 us at 32k batch 1, hence 2 there.
  int decode_early_stages = 0;
  // Decode at head dim 64 with 4 warps, one CTA per SM and no cluster combine (elsewhere ignored): how a warp
  // loads its K/V tiles. 0 = 16-byte cp.async by every lane; 1 = TMA, one cp.async.bulk.tensor per K and per V
  // tile completing on a per-stage mbarrier (64-key tiles, 3 stages per warp); 2 = TMA with 32-key tiles and 6
  // stages (same ring bytes, 5/6 of them in flight instead of 2/3). With TMA a warp loads the block-table
  // entries of its tiles 32 at a time, ahead of their issue. -1 = the measured default: 1 with the early
  // contract (decode_early_kv) where the grid fits one wave of CTAs (batch 1 and 8: 32k -0.6 us / -1%; its
  // decode_early_stages default then 2), else 0 (without the contract, or several waves such as batch 64 x 4k,
  // TMA measured 1-2% slower). bench/RESULTS.md "Decode attention v7".
  int decode_tma = -1;
};

// Prefill / chunked prefill / any multi-token attention over the paged cache.
struct AttentionPrefillArgs {
  const bf16* q = nullptr;              // [total_q, n_head, head_dim], rows of sequence b at cu_seqlens_q[b] ..
  bf16* out = nullptr;                  // [total_q, n_head, head_dim]
  float* lse = nullptr;                 // [total_q, n_head] natural-log sum-exp of the scaled scores; may be null
  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1] device, cu_seqlens_q[0] = 0, non-decreasing
  const int32_t* seq_lens_k = nullptr;    // [batch] device, kv length per sequence, >= its q length
  KvCacheView kv;
  BlockTableView block_table;
  int batch = 0;
  int total_q = 0;       // cu_seqlens_q[batch]
  int max_seqlen_q = 0;  // >= every q length (sizes the grid)
  int max_seqlen_k = 0;  // >= every seq_lens_k; must fit max_blocks_per_seq * kv_block_size
  int n_head = 0;        // multiple of kv.n_kv_head (GQA ratio n_head / n_kv_head, any integer)
  float scale = 0.f;     // softmax scale, usually 1/sqrt(head_dim); 0 means 1/sqrt(head_dim)
  bool causal = true;
};

// Validates the arguments (head_dim in {64, 128}, alignments, capacity) and launches. Refusals name the
// parameter and the supported set. Asynchronous on `stream`.
Status attention_prefill(cudaStream_t stream, const AttentionPrefillArgs& args, const AttentionOptions& opt = {});

// Decode with RoPE in the attention kernel (AttentionDecodeArgs::rope, set when qkv is non-null): q is not read
// from `q` but made from this step's raw projections (bias, per-head RMSNorm, RoPE at the sequence's newest
// position seq_lens_k - 1; cuda/common/rope_head.cuh, the RoPE kernel's arithmetic), and the kernel writes that
// position's K/V row (k normed and rotated) into the cache itself, so the kernel before it writes only the raw
// projections: Qwen3's q/k norm needs whole heads, which an attention CTA has and the QKV matvec's blocks do not.
struct DecodeRope {
  const float* qkv = nullptr;  // [batch, (n_head + 2 n_kv_head) * head_dim] f32: q heads, k heads, v heads
  bool pair_rows = false;      // every head's values in rope-pair order (dims i, i + D/2 at 2i, 2i + 1)
  const float* bias = nullptr;     // [(n_head + 2 n_kv_head) * head_dim], the order of qkv, or null
  const float* q_norm = nullptr;   // [head_dim] HF order, or null
  const float* k_norm = nullptr;   // [head_dim] HF order, or null
  float eps = 1e-6f;
  const float* inv_freq = nullptr;  // [head_dim / 2]
};

// Decode: one query token per sequence attending to its whole cached context (split-KV / flash-decoding in one
// kernel: partial results per KV split, combined by the last split to finish). The query heads of one kv head
// share every K/V load.
struct AttentionDecodeArgs {
  const bf16* q = nullptr;            // [batch, n_head, head_dim]
  bf16* out = nullptr;                // [batch, n_head, head_dim]
  float* lse = nullptr;               // [batch, n_head] natural log; may be null
  const int32_t* seq_lens_k = nullptr;  // [batch] device, >= 1 (the current token already appended)
  KvCacheView kv;
  BlockTableView block_table;
  int batch = 0;         // 1 .. 64 tested; any >= 1 accepted
  int n_head = 0;        // multiple of kv.n_kv_head, n_head / n_kv_head <= 64
  int max_seqlen_k = 0;  // >= every seq_lens_k; fixes the split count (so a CUDA graph may be captured once)
  float scale = 0.f;     // 0 means 1/sqrt(head_dim)
  void* workspace = nullptr;  // device scratch of attention_decode_workspace_bytes(...) bytes; any initial
                              // contents (the kernel recognises and resets its own counters)
  size_t workspace_bytes = 0;
  DecodeRope rope;  // rope.qkv non-null: q from the raw projections and the newest K/V row written here (above);
                    // q is then not read (may be null); the cp.async K/V path is used (decode_tma ignored)
};

// Whether the decode kernel with AttentionDecodeArgs::rope keeps within the shared-memory carveout it runs under
// without it (true up to 8 query heads per kv head at head dim 128, 16 at 64). It works either way, but a kernel that
// needs a larger carveout does not overlap the kernels around it (bench/RESULTS.md, session 8: 10% on a decode step).
bool attention_decode_rope_fits(int n_head, int n_kv_head, int head_dim);

// Split count that attention_decode will use for this shape on the current device (>= 1).
int attention_decode_splits(int batch, int n_kv_head, int max_seqlen_k, const AttentionOptions& opt = {});
// Scratch the decode needs: partial outputs [batch, n_head, n_split, head_dim] f32 + partial LSE + one 8-byte
// arrival counter per (sequence, kv head, 16-head chunk). One workspace per stream: calls that may run
// concurrently need their own.
size_t attention_decode_workspace_bytes(int batch, int n_head, int n_kv_head, int head_dim, int max_seqlen_k,
                                        const AttentionOptions& opt = {});

Status attention_decode(cudaStream_t stream, const AttentionDecodeArgs& args, const AttentionOptions& opt = {});

// Writes new K/V rows into the paged cache: row t goes to sequence seq_idx[t] at position positions[t].
//   k_new, v_new  [n_tokens, n_kv_head, head_dim] bf16 (row stride may be larger: row_stride elements, e.g.
//                 when K and V are slices of a fused QKV output)
//   seq_idx       [n_tokens] int32 device, row of the block table
//   positions     [n_tokens] int32 device, < max_position_bound
// max_position_bound is the caller's bound on every position + 1; it must fit the per-sequence capacity
// (max_blocks_per_seq * kv_block_size), else an error (never a silent truncation). Rows whose position or
// block index is nevertheless out of range are skipped on the device (never written out of bounds).
Status kv_append(cudaStream_t stream, const KvCacheView& kv, const BlockTableView& block_table, const bf16* k_new,
                 const bf16* v_new, int64_t row_stride, const int32_t* seq_idx, const int32_t* positions,
                 int n_tokens, int max_position_bound);

}  // namespace mk::cuda
