// Internal interface between the attention dispatcher (attention.cu) and the per-head-dim kernel files.
// Arguments are validated by the dispatcher; launchers only compute the grid and launch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/attention/attention.h"

namespace mk::cuda::attn {

struct PrefillParams {
  const bf16* q;        // [total_q, n_head, D]
  bf16* out;            // [total_q, n_head, D]
  float* lse;           // [total_q, n_head] or null
  const int32_t* cu_seqlens_q;  // [batch + 1]
  const int32_t* seq_lens_k;    // [batch]
  const bf16* k;        // [kv_n_blocks, block_size, n_kv_head, D]
  const bf16* v;        // [kv_n_blocks, block_size, n_kv_head, D]
  const int32_t* block_table;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq, block_size, n_kv_head, n_head, group;
  int batch, max_seqlen_q, kv_capacity;  // kv_capacity = max_blocks_per_seq * block_size (clamps reads)
  float scale_log2;         // softmax scale * log2(e)
  int n_poly;               // FA-4 (a): of each thread's 8 key columns-pairs per 64-key tile, how many use exp2_poly
  float rescale_threshold;  // FA-4 (b): log2 units; 0 = rescale on every growth of the running max
  bool causal;
  bool overlap;  // Hopper kernel: intra-warpgroup overlap of softmax with the next tile's GEMMs
  bool pingpong;  // Hopper kernel: consumer warpgroups take turns issuing GEMMs (named barriers)
  int n_wg;       // Hopper kernel: consumer warpgroups of 64 query rows (2; or 3 at head dim 64)
  int lpt_units;  // Hopper kernel: CTA order, longest first within sections of this many (sequence, head)
                  // units; 0 = one unit after another (prefill_hopper.cuh, cta_tile)
};

struct DecodeParams {
  const bf16* q;        // [batch, n_head, D]
  bf16* out;            // [batch, n_head, D]
  float* lse;           // [batch, n_head] or null
  const int32_t* seq_lens_k;  // [batch]
  const bf16* k;        // paged pool, as PrefillParams
  const bf16* v;
  const int32_t* block_table;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq, block_size, n_kv_head, n_head, group;
  int batch, n_split, kv_capacity;
  int kv_n_blocks;       // pool blocks (clamps the L2 prefetch's addresses)
  int l2_prefetch_tiles;  // tiles per warp prefetched into L2 before the PDL wait (0 = none)
  float scale_log2;
  float* o_part;    // [batch, n_head, n_split, D] f32, each split's output normalised by its own sum
  float* lse_part;  // [batch, n_head, n_split] (log2 units)
  unsigned long long* counters;  // [batch, n_kv_head * ceil(group / 16)] split arrivals (self-resetting)
  int early_stages;  // EARLY: ring stages issued before the PDL wait, 1 .. 3 (= the whole ring; thirds of it with
                     // 6-stage TMA rings); 0 = the default of launch_decode (DECODE_TMA_EARLY_STAGES with TMA
                     // tiles; 3 at head dim 64 with one 4-warp CTA per SM, no cluster; else 2)
  DecodeRope rope;   // rope.qkv non-null: q and the newest K/V row made in the kernel (attention.h)
  bf16* k_new;       // rope: the pools again, writable (the newest row is written through these)
  bf16* v_new;
};

// AttentionOptions::decode_tma = -1 under the early contract with a one-wave grid, and the ring stages issued
// before the PDL wait with TMA tiles when decode_early_stages = 0 (bench/RESULTS.md "Decode attention v7").
constexpr int DECODE_TMA_DEFAULT = 1;
constexpr int DECODE_TMA_EARLY_STAGES = 2;
constexpr int DECODE_WARPS = 4;  // warps per decode CTA (192 KB of shared memory; 96 KB with 2 CTAs per SM)

// How the decode kernel is built and launched (from AttentionOptions).
struct DecodeLaunch {
  bool pdl = true;       // programmatic stream serialisation (griddepcontrol.wait before dependent reads)
  int warps = 4;         // 4, or 8 (half-size tiles, one CTA per SM)
  int ctas_per_sm = 1;   // 1 (192 KB ring) or 2 (96 KB: half-size tiles), with 4 warps
  bool early_kv = false; // AttentionOptions::decode_early_kv (K/V tiles below the newest row before the wait)
  bool cluster = false;  // AttentionOptions::decode_cluster_combine (split combine in a cluster, through DSMEM)
  int tma = 0;           // AttentionOptions::decode_tma (1, 2; 0 = cp.async) where it applies (head dim 64, 4 warps,
                         // 1 CTA/SM, no cluster), its default resolved
};

cudaError_t launch_prefill_simple_d64(const PrefillParams& p, cudaStream_t s);
cudaError_t launch_prefill_simple_d128(const PrefillParams& p, cudaStream_t s);
// total_q: rows of q; pool_rows: kv_n_blocks * kv_block_size (extents of the TMA tensor maps).
cudaError_t launch_prefill_hopper_d64(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s);
cudaError_t launch_prefill_hopper_d128(const PrefillParams& p, int64_t total_q, int64_t pool_rows, cudaStream_t s);
// Trace build only (prefill_hopper_d*.cu compiled with MK_PREFILL_TRACE=1): arms per-CTA globaltimer records of the
// next launches of that head dim's Hopper prefill, 64 bytes per CTA indexed by blockIdx.x (prefill_hopper.cuh);
// elsewhere returns cudaErrorNotSupported.
cudaError_t prefill_trace_arm_d64(void* buf, size_t bytes);
cudaError_t prefill_trace_arm_d128(void* buf, size_t bytes);
// 3-D TMA map over a [rows, heads, D] bf16 tensor, box [64 rows, 1 head, 64 columns], 128-byte swizzle
// (CUtensorMap is passed as void* so that this header needs no driver API header).
// box_rows (<= 256) and l2_promotion (0, 64, 128 or 256 bytes) other than the defaults: the decode's TMA tiles.
cudaError_t make_tensor_map_3d(void* map, const void* base, int d, int heads, int64_t rows, int box_rows = 64,
                               int l2_promotion = 256);
cudaError_t launch_decode(const DecodeParams& p, int head_dim, cudaStream_t s, const DecodeLaunch& l);
// attention_decode_rope_fits (attention.h) for one kv head's group of query heads.
bool decode_rope_fits_carveout(int group, int head_dim);
// Clusters of n_split decode CTAs (4 warps, ctas_per_sm ring) the device can hold at once (0: none / error);
// the cluster combine is used only where one wave of them fits. For the benchmark's report.
int decode_cluster_capacity(int head_dim, int n_split, int ctas_per_sm, bool two_rows);
// Trace build only (decode.cu compiled with MK_DECODE_TRACE=1): arms per-CTA globaltimer records, 64 bytes each,
// in `buf` (device) and resets the ticket; elsewhere returns cudaErrorNotSupported.
cudaError_t decode_trace_arm(void* buf, size_t bytes);

}  // namespace mk::cuda::attn
