// Attention dispatcher: validates arguments (refusals name the parameter and the supported set), picks the
// kernel and its launch shape, and the KV-cache append kernel. Kernels live in prefill_*.cu and decode.cu.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/attention/attention.h"
#include "cuda/attention/attn_common.cuh"
#include "cuda/attention/attn_internal.h"
#include "cuda/common/rope_head.cuh"
#include "cuda/common/sm_count.h"

namespace mk::cuda {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

Status check_kv(const char* fn, const KvCacheView& kv, const BlockTableView& bt, int n_head, int max_seqlen_k) {
  if (kv.dtype != DType::BF16)
    return make_error(fn, ": dtype ", dtype_name(kv.dtype), " is not supported (supported: BF16)");
  if (kv.head_dim != 64 && kv.head_dim != 128)
    return make_error(fn, ": head_dim ", kv.head_dim, " is not supported (supported: 64, 128)");
  if (!kv.k || !kv.v || !aligned16(kv.k) || !aligned16(kv.v))
    return make_error(fn, ": kv.k and kv.v must be non-null device pointers aligned to 16 bytes");
  if (kv.kv_block_size <= 0 || kv.kv_block_size % KV_BLOCK_ALIGN != 0)
    return make_error(fn, ": kv_block_size ", kv.kv_block_size, " must be a positive multiple of ", KV_BLOCK_ALIGN);
  if (kv.kv_n_blocks <= 0) return make_error(fn, ": kv_n_blocks ", kv.kv_n_blocks, " must be positive");
  if (kv.n_kv_head <= 0 || n_head <= 0 || n_head % kv.n_kv_head != 0)
    return make_error(fn, ": n_head ", n_head, " must be a positive multiple of n_kv_head ", kv.n_kv_head);
  if (!bt.data || bt.max_blocks_per_seq <= 0)
    return make_error(fn, ": block_table needs data and max_blocks_per_seq > 0 (got ", bt.max_blocks_per_seq, ")");
  const int64_t capacity = int64_t(bt.max_blocks_per_seq) * kv.kv_block_size;
  if (max_seqlen_k <= 0 || max_seqlen_k > capacity)
    return make_error(fn, ": max_seqlen_k ", max_seqlen_k, " must be in [1, KV capacity ", capacity,
                      " = max_blocks_per_seq ", bt.max_blocks_per_seq, " x kv_block_size ", kv.kv_block_size, "]");
  return {};
}

float scale_log2(float scale, int head_dim) {
  return (scale > 0.f ? scale : 1.f / std::sqrt(float(head_dim))) * attn::LOG2E;
}

Status launch_status(const char* fn, cudaError_t e) {
  if (e != cudaSuccess) return make_error(fn, ": kernel launch failed: ", cudaGetErrorString(e));
  return {};
}

bool device_is_sm90() {
  static bool v = [] {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return v;
}

// The parameters prefill and decode share (PrefillParams / DecodeParams): queries, outputs, the paged K/V with
// its block table, the head layout and the softmax scale.
template <class P, class A>
void fill_paged(P& p, const A& a) {
  p.q = a.q;
  p.out = a.out;
  p.lse = a.lse;
  p.seq_lens_k = a.seq_lens_k;
  p.k = a.kv.k;
  p.v = a.kv.v;
  p.block_table = a.block_table.data;
  p.max_blocks_per_seq = a.block_table.max_blocks_per_seq;
  p.block_size = a.kv.kv_block_size;
  p.n_kv_head = a.kv.n_kv_head;
  p.n_head = a.n_head;
  p.group = a.n_head / a.kv.n_kv_head;
  p.batch = a.batch;
  p.kv_capacity = a.block_table.max_blocks_per_seq * a.kv.kv_block_size;
  p.scale_log2 = scale_log2(a.scale, a.kv.head_dim);
}

// Bytes of the decode workspace before its arrival counters: partial outputs [rows, head_dim] f32 and partial LSEs
// [rows], rounded up to 16 (attention_decode_workspace_bytes, attention_decode).
size_t decode_partials_bytes(size_t rows, int head_dim) {
  return (rows * (size_t(head_dim) + 1) * sizeof(float) + 15) / 16 * 16;
}

}  // namespace

Status attention_prefill(cudaStream_t stream, const AttentionPrefillArgs& a, const AttentionOptions& opt) {
  const char* fn = "attention_prefill";
  MK_TRY(check_kv(fn, a.kv, a.block_table, a.n_head, a.max_seqlen_k));
  if (!a.q || !a.out || !aligned16(a.q) || !aligned16(a.out))
    return make_error(fn, ": q and out must be non-null device pointers aligned to 16 bytes");
  if (!a.cu_seqlens_q || !a.seq_lens_k) return make_error(fn, ": cu_seqlens_q and seq_lens_k are required");
  if (a.batch <= 0 || a.total_q <= 0 || a.max_seqlen_q <= 0)
    return make_error(fn, ": batch, total_q and max_seqlen_q must be positive (got ", a.batch, ", ", a.total_q, ", ",
                      a.max_seqlen_q, ")");
  if (a.max_seqlen_q > a.max_seqlen_k)
    return make_error(fn, ": max_seqlen_q ", a.max_seqlen_q, " exceeds max_seqlen_k ", a.max_seqlen_k,
                      " (queries are the last positions of their sequence: append K/V first)");
  if (opt.poly_exp2_fraction < 0.f || opt.poly_exp2_fraction > 1.f || opt.rescale_threshold < 0.f)
    return make_error(fn, ": poly_exp2_fraction must be in [0, 1] and rescale_threshold >= 0");
  attn::PrefillParams p{};
  fill_paged(p, a);
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.max_seqlen_q = a.max_seqlen_q;
  p.n_poly = std::clamp(int(std::lround(opt.poly_exp2_fraction * 8.f)), 0, 8);
  if (p.n_poly > 4 && p.n_poly < 8) p.n_poly = p.n_poly < 6 ? 4 : 8;  // kernels are built for 0..4 and 8 eighths
  // Polynomial exp2 is valid only for arguments <= 8 + a margin: lazy rescaling bounds them by the threshold.
  p.rescale_threshold = opt.lazy_rescale ? std::min(opt.rescale_threshold, 8.f) : 0.f;
  p.causal = a.causal;
  p.overlap = opt.hopper_overlap;
  p.pingpong = opt.hopper_pingpong;
  const bool d64 = a.kv.head_dim == 64;
  const int wgs = opt.hopper_consumer_warpgroups;
  if (wgs != 0 && wgs != 2 && !(d64 && wgs == 3))
    return make_error(fn, ": hopper_consumer_warpgroups ", wgs, " is not supported at head_dim ", a.kv.head_dim,
                      " (supported: 0 = default, 2", d64 ? ", 3)" : ")");
  p.n_wg = wgs != 0 ? wgs : d64 ? 3 : 2;
  p.lpt_units = 0;
  // Causal only: non-causal row blocks all cost the same, and unit by unit a head's K/V stays in L2 for its
  // consecutive CTAs (H200, session 12: +1.7% at head dim 64, +2.3% at 128, 16k non-causal without it).
  if (opt.hopper_lpt_schedule && a.causal) {  // sections of heads whose K + V (32 MB of L2 at most) are read together
    const int64_t kv_head_bytes = int64_t(2) * a.max_seqlen_k * a.kv.head_dim * 2;
    p.lpt_units = int(std::clamp<int64_t>((int64_t(32) << 20) / kv_head_bytes, 1, a.kv.n_kv_head)) * p.group;
  }
  const bool hopper = opt.prefill_kernel == PrefillKernel::HOPPER ||
                      (opt.prefill_kernel == PrefillKernel::AUTO && device_is_sm90() &&
                       a.max_seqlen_q > opt.simple_max_q);
  if (opt.prefill_kernel == PrefillKernel::HOPPER && !device_is_sm90())
    return make_error(fn, ": prefill_kernel HOPPER needs an sm_90 GPU (use AUTO or SIMPLE)");
  cudaError_t e;
  if (hopper) {
    const int64_t pool_rows = int64_t(a.kv.kv_n_blocks) * a.kv.kv_block_size;
    e = d64 ? attn::launch_prefill_hopper_d64(p, a.total_q, pool_rows, stream)
            : attn::launch_prefill_hopper_d128(p, a.total_q, pool_rows, stream);
  } else {
    e = d64 ? attn::launch_prefill_simple_d64(p, stream) : attn::launch_prefill_simple_d128(p, stream);
  }
  return launch_status(fn, e);
}

bool attention_decode_rope_fits(int n_head, int n_kv_head, int head_dim) {
  return n_kv_head > 0 && (head_dim == 64 || head_dim == 128) &&
         attn::decode_rope_fits_carveout(n_head / n_kv_head, head_dim);
}

int attention_decode_splits(int batch, int n_kv_head, int max_seqlen_k, const AttentionOptions& opt) {
  if (opt.decode_splits > 0) return std::min(opt.decode_splits, 1024);
  // Cost model in 64-key units (one unit per warp step): waves of CTAs (decode_ctas_per_sm per SM) times the
  // steps of the longest warp plus one step of per-CTA start/drain, plus the final combine (one step, more for
  // many splits). Ties: fewer splits. (Without the per-CTA step, batch 64 x 32k chose 32 splits for a 0.7%
  // better last wave and ran at 72% of the read ceiling instead of ~95%.)
  const int64_t units = std::max(1, batch) * int64_t(std::max(1, n_kv_head));
  const int64_t slots = int64_t(sm_count()) * (opt.decode_ctas_per_sm == 2 ? 2 : 1);
  const int64_t tiles = std::max(1, (max_seqlen_k + 63) / 64);
  int best = 1;
  double best_cost = 1e300;
  for (int n = 1; n <= std::min<int64_t>(tiles, 256); ++n) {
    const int64_t per = (tiles + n - 1) / n, used = (tiles + per - 1) / per;
    if (used < n) continue;  // same split boundaries as a smaller n
    const int64_t waves = (units * n + slots - 1) / slots;
    const int64_t steps = (per + attn::DECODE_WARPS - 1) / attn::DECODE_WARPS;
    const double cost = double(waves * (steps + 1)) + (n > 1 ? 1.0 + n / 16.0 : 0.0);
    if (cost < best_cost) {
      best_cost = cost;
      best = n;
    }
  }
  return best;
}

size_t attention_decode_workspace_bytes(int batch, int n_head, int n_kv_head, int head_dim, int max_seqlen_k,
                                        const AttentionOptions& opt) {
  const size_t rows = size_t(batch) * n_head * attention_decode_splits(batch, n_kv_head, max_seqlen_k, opt);
  const size_t part = decode_partials_bytes(rows, head_dim);
  const size_t group = n_kv_head > 0 ? size_t(std::max(1, n_head / n_kv_head)) : 1;
  return part + size_t(batch) * n_kv_head * ((group + 15) / 16) * sizeof(unsigned long long);
}

Status attention_decode(cudaStream_t stream, const AttentionDecodeArgs& a, const AttentionOptions& opt) {
  const char* fn = "attention_decode";
  MK_TRY(check_kv(fn, a.kv, a.block_table, a.n_head, a.max_seqlen_k));
  const bool rope = a.rope.qkv != nullptr;
  if ((!rope && (!a.q || !aligned16(a.q))) || !a.out || !aligned16(a.out))
    return make_error(fn, ": q (unless rope.qkv is set) and out must be non-null device pointers aligned to 16 bytes");
  if (rope && (!a.rope.inv_freq || a.kv.head_dim > 2 * 32 * ROPE_MAX_PAIRS_PER_LANE))
    return make_error(fn, ": rope.qkv needs rope.inv_freq and a head dim of at most ", 2 * 32 * ROPE_MAX_PAIRS_PER_LANE);
  if (!a.seq_lens_k || a.batch <= 0 || a.batch > 65535)
    return make_error(fn, ": seq_lens_k is required and batch must be in [1, 65535] (got ", a.batch, ")");
  if (a.n_head / a.kv.n_kv_head > 64)
    return make_error(fn, ": GQA ratio ", a.n_head / a.kv.n_kv_head, " is not supported (at most 64)");
  if (opt.decode_splits < 0) return make_error(fn, ": decode_splits ", opt.decode_splits, " must be >= 0");
  if (opt.decode_early_stages < 0 || opt.decode_early_stages > 3)
    return make_error(fn, ": decode_early_stages ", opt.decode_early_stages, " is not supported (supported: 0 = default, 1, 2, 3)");
  if (opt.decode_tma < -1 || opt.decode_tma > 2)
    return make_error(fn, ": decode_tma ", opt.decode_tma, " is not supported (supported: -1 = default, 0 = cp.async, 1, 2)");
  if (opt.decode_warps != 0 && opt.decode_warps != 4 && opt.decode_warps != 8)
    return make_error(fn, ": decode_warps ", opt.decode_warps, " is not supported (supported: 0 = default, 4, 8)");
  if (opt.decode_ctas_per_sm < 0 || opt.decode_ctas_per_sm > 2 || (opt.decode_ctas_per_sm == 2 && opt.decode_warps == 8))
    return make_error(fn, ": decode_ctas_per_sm ", opt.decode_ctas_per_sm,
                      " is not supported (supported: 0 = default, 1, 2; 2 only with 4 warps)");
  const int n_split = attention_decode_splits(a.batch, a.kv.n_kv_head, a.max_seqlen_k, opt);
  const size_t need = attention_decode_workspace_bytes(a.batch, a.n_head, a.kv.n_kv_head, a.kv.head_dim,
                                                       a.max_seqlen_k, opt);
  if (!a.workspace || a.workspace_bytes < need || !aligned16(a.workspace))
    return make_error(fn, ": workspace of ", need, " bytes (16-byte aligned) required, got ", a.workspace_bytes);
  attn::DecodeParams p{};
  fill_paged(p, a);
  p.n_split = n_split;
  p.kv_n_blocks = a.kv.kv_n_blocks;
  p.l2_prefetch_tiles = opt.decode_pdl ? std::clamp(opt.decode_l2_prefetch_tiles, 0, 64) : 0;
  p.early_stages = std::clamp(opt.decode_early_stages, 0, 3);
  p.rope = a.rope;
  p.k_new = a.kv.k;
  p.v_new = a.kv.v;
  const size_t rows = size_t(a.batch) * a.n_head * n_split;
  p.o_part = static_cast<float*>(a.workspace);
  p.lse_part = p.o_part + rows * a.kv.head_dim;
  p.counters = reinterpret_cast<unsigned long long*>(static_cast<char*>(a.workspace) +
                                                     decode_partials_bytes(rows, a.kv.head_dim));
  attn::DecodeLaunch l;
  l.pdl = opt.decode_pdl;
  l.warps = opt.decode_warps == 8 ? 8 : attn::DECODE_WARPS;
  l.ctas_per_sm = opt.decode_ctas_per_sm == 2 ? 2 : 1;
  l.early_kv = opt.decode_early_kv && opt.decode_pdl && l.warps == 4;
  l.cluster = opt.decode_cluster_combine && l.warps == 4;
  // decode_tma's default: TMA tiles under the early contract where the grid fits one wave (measured faster there).
  const int64_t ctas = int64_t(n_split) * a.kv.n_kv_head * ((p.group + 15) / 16) * a.batch;
  const int tma = opt.decode_tma >= 0 ? opt.decode_tma : l.early_kv && ctas <= sm_count() ? attn::DECODE_TMA_DEFAULT : 0;
  // (rope: the kernel's own write of the newest row is ordered before its cp.async reads by a CTA barrier; TMA
  // reads would need a proxy fence as well.)
  l.tma = a.kv.head_dim == 64 && l.warps == 4 && l.ctas_per_sm == 1 && !l.cluster && !rope ? tma : 0;
  return launch_status(fn, attn::launch_decode(p, a.kv.head_dim, stream, l));
}

namespace attn {

// The driver's tensor-map encoder, fetched through the runtime (no link dependency on libcuda).
cudaError_t make_tensor_map_3d(void* map, const void* base, int d, int heads, int64_t rows, int box_rows,
                               int l2_promotion) {
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static EncodeFn encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<EncodeFn>(fn);
  }();
  if (!encode) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(heads), cuuint64_t(rows)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 2, cuuint64_t(heads) * d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, 1, cuuint32_t(box_rows)};
  const CUtensorMapL2promotion promo = l2_promotion == 0    ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                       : l2_promotion == 64  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                                       : l2_promotion == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                             : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base),
                            dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, promo,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace attn

namespace {

// One CTA per new token; each thread copies 16-byte vectors of K and V rows.
__global__ void kv_append_kernel(bf16* k, bf16* v, const int32_t* block_table, int max_blocks_per_seq,
                                 int block_size, int n_blocks, int n_kv_head, int head_dim, const bf16* k_new,
                                 const bf16* v_new, int64_t row_stride, const int32_t* seq_idx,
                                 const int32_t* positions) {
  const int t = blockIdx.x;
  const int pos = positions[t], sq = seq_idx[t];
  if (pos < 0 || pos >= max_blocks_per_seq * block_size || sq < 0) return;  // never write out of bounds
  const int blk = block_table[int64_t(sq) * max_blocks_per_seq + pos / block_size];
  if (blk < 0 || blk >= n_blocks) return;
  const int64_t dst = (int64_t(blk) * block_size + pos % block_size) * n_kv_head * head_dim;
  const int n_vec = n_kv_head * head_dim / 8;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    reinterpret_cast<uint4*>(k + dst)[i] = reinterpret_cast<const uint4*>(k_new + t * row_stride)[i];
    reinterpret_cast<uint4*>(v + dst)[i] = reinterpret_cast<const uint4*>(v_new + t * row_stride)[i];
  }
}

}  // namespace

Status kv_append(cudaStream_t stream, const KvCacheView& kv, const BlockTableView& bt, const bf16* k_new,
                 const bf16* v_new, int64_t row_stride, const int32_t* seq_idx, const int32_t* positions,
                 int n_tokens, int max_position_bound) {
  const char* fn = "kv_append";
  MK_TRY(check_kv(fn, kv, bt, kv.n_kv_head, std::max(1, max_position_bound)));
  if (n_tokens <= 0) return {};
  if (!k_new || !v_new || !seq_idx || !positions || !aligned16(k_new) || !aligned16(v_new) || row_stride % 8 != 0 ||
      row_stride < int64_t(kv.n_kv_head) * kv.head_dim)
    return make_error(fn, ": k_new/v_new must be 16-byte aligned with row_stride (", row_stride,
                      ") a multiple of 8 and >= n_kv_head * head_dim; seq_idx and positions are required");
  kv_append_kernel<<<n_tokens, 128, 0, stream>>>(kv.k, kv.v, bt.data, bt.max_blocks_per_seq, kv.kv_block_size,
                                                  kv.kv_n_blocks, kv.n_kv_head, kv.head_dim, k_new, v_new, row_stride,
                                                  seq_idx, positions);
  return launch_status(fn, cudaGetLastError());
}

}  // namespace mk::cuda
