// Device helpers of the split-KV decode kernel (decode_kernel.cuh): tile sizes, the MK_DECODE_TRACE stamps, the L2
// prefetch of a warp's first tiles, the last-CTA arrival and bf16 stores (PDL controls: cuda/common/device.cuh).
// Included only by decode.cu (through decode_kernel.cuh): everything is in that translation unit's anonymous
// namespace.
#pragma once
#include "cuda/attention/attn_common.cuh"
#include "cuda/common/device.cuh"  // PDL controls, globaltimer_ns, sm_id, atom_add_acq_rel_gpu
#include "cuda/attention/attn_internal.h"

namespace mk::cuda::attn {
namespace {

constexpr int NS = 3;            // ring stages per warp (NS - 1 tiles in flight while one is computed)
constexpr int HROWS = 16;        // query heads per CTA (mma M)
constexpr unsigned long long CTR_MAGIC = 0xdec0de5au;  // high word of a valid arrival counter

// W warps per CTA (DECODE_WARPS = 4 by default; 8 = twice the warps with half-size tiles, same ring bytes).
// CPS = CTAs per SM the ring is sized for: 1 = 192 KB; 2 = 96 KB (half-size tiles), so that two CTAs fit on an
// SM: the next call's CTAs (PDL) can be resident and waiting while this call's still run.
template <int D, int W, int CPS>
__host__ __device__ constexpr int tile_keys() {  // 16 KB of K+V per tile with 4 warps, 8 KB with 8 or 2 CTAs/SM
  return (W == 4 && CPS == 1 ? 64 : 32) * 64 / D;
}
template <int D, int W, int CPS>
constexpr int smem_bytes() {  // W warps x NS stages x (K + V tile)
  return W * NS * 2 * tile_keys<D, W, CPS>() * D * 2;
}
static_assert(smem_bytes<64, 4, 1>() == 196608 && smem_bytes<128, 4, 1>() == 196608 &&
                  smem_bytes<64, 8, 1>() == 196608 && smem_bytes<128, 8, 1>() == 196608,
              "one 192 KB CTA per SM");
static_assert(smem_bytes<64, 4, 2>() == 98304 && smem_bytes<128, 4, 2>() == 98304, "two 96 KB CTAs per SM");

// TMA tiles (AttentionOptions::decode_tma; head dim 64, 4 warps, one CTA per SM): TS stages per warp of TS = 3:
// 64 keys, TS = 6: 32 keys (the same 192 KB ring), plus 1 KB so that the ring can start 1024-byte aligned (the
// TMA's 128-byte swizzle repeats every 8 rows of 128 bytes from such a base, matching swz<64>).
template <int TS>
__host__ __device__ constexpr int tma_tile_keys() {
  return TS == 6 ? 32 : 64;
}
template <int TS>
constexpr int smem_bytes_tma() {
  return 4 * TS * 2 * tma_tile_keys<TS>() * 64 * 2 + 1024;
}
static_assert(smem_bytes_tma<3>() == 196608 + 1024 && smem_bytes_tma<6>() == 196608 + 1024, "one 193 KB CTA per SM");

// Makes lane 0's mbarrier.init visible to the TMA unit (async proxy) before the first copy completes on it.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  fence_proxy_async();
}

// One warp's K and V tile by TMA (called by one lane): rows [row, row + box rows) of kv head hk from both pools
// into s_k and s_k + v_off (elements), completing `bytes` on `bar`. The box is the tensor maps' (box rows = the
// tile's keys); rows outside the pool read as zeros (TMA bounds), so a bad block-table entry cannot fault.
__device__ __forceinline__ void tma_tile(bf16* s_k, int v_off, uint64_t* bar, const CUtensorMap* tm_k,
                                         const CUtensorMap* tm_v, int hk, int row, uint32_t bytes) {
  mbar_arrive_expect_tx(bar, bytes);
  tma_load_3d(s_k, tm_k, bar, 0, hk, row);
  tma_load_3d(s_k + v_off, tm_v, bar, 0, hk, row);
}

// A TMA tile past the end of the keys holds other positions' rows (any bits, NaN included): the scores of those
// keys are masked to -inf, so P is 0 there, but 0 * NaN in P V is not 0 — zero V's rows [n_valid, TK). Whole
// 128-byte rows, so the swizzle does not matter. The fence orders these generic writes before the TMA that
// refills the stage later (async proxy); the warp barrier before anyone's ldmatrix.
template <int D>
__device__ __forceinline__ void tma_zero_rows(bf16* s_v, int n_valid, int tk, int lane) {
  for (int c = lane; c < (tk - n_valid) * (D / 8); c += 32)
    *reinterpret_cast<uint4*>(s_v + (n_valid + c / (D / 8)) * D + (c % (D / 8)) * 8) = make_uint4(0, 0, 0, 0);
  fence_proxy_async();
  __syncwarp();
}

// MK_DECODE_TRACE = 1 (a diagnostic build of this file only, never the library's): thread 0 of every CTA
// stamps globaltimer at entry, after the PDL wait, after its K/V loop, after its partial is written, after the
// arrival and at its end, into the buffer armed by decode_trace_arm (bench/attention.cpp 'dectrace').
#ifndef MK_DECODE_TRACE
#define MK_DECODE_TRACE 0
#endif
#if MK_DECODE_TRACE
__device__ unsigned long long* g_trace;  // [tickets][8]: id word, then 6 stamps (ns) and 0
__device__ unsigned g_trace_ticket, g_trace_cap;
#define TR_STAMP(k) (tr_[k] = globaltimer_ns())
// Tickets are taken at a CTA's end; call N + 1's CTAs end after their PDL wait, i.e. after call N completed, so
// every CTA of call N holds a smaller ticket than any of call N + 1.
#define TR_STORE(last)                                                                                       \
  do {                                                                                                       \
    if (threadIdx.x == 0 && g_trace) {                                                                       \
      const unsigned tk = atomicAdd(&g_trace_ticket, 1u);                                                    \
      if (tk < g_trace_cap) {                                                                                \
        const unsigned smid = sm_id();                                                                       \
        unsigned long long* r = g_trace + 8ull * tk;                                                         \
        r[0] = blockIdx.x | (unsigned long long)blockIdx.y << 16 | (unsigned long long)smid << 32 |          \
               (unsigned long long)(last) << 48;                                                             \
        for (int k_ = 0; k_ < 6; ++k_) r[1 + k_] = tr_[k_];                                                  \
        r[7] = 0;                                                                                            \
      }                                                                                                      \
    }                                                                                                        \
  } while (0)
#else
#define TR_STAMP(k) ((void)0)
#define TR_STORE(last) ((void)0)
#endif

__device__ __forceinline__ uint32_t ld_b32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Before the PDL wait, without the early-K/V contract: prefetch into L2 this warp's first n tiles of K and V
// (128-byte lines), so that DRAM works during the previous kernel's tail. seq_lens_k and the block table may be
// being written by that kernel: their values here only choose the lines (block indices clamped into the pool,
// so every address is inside the allocation); the kernel re-reads both after the wait (the wait's "memory"
// clobber keeps the compiler from reusing these loads) and L2 is coherent, so a stale choice only wastes a
// prefetch. Same split arithmetic as the kernel.
template <int D, int W, int TK>
__device__ __forceinline__ void prefetch_first_tiles(const DecodeParams& p, int b, int split, int hk, int warp,
                                                     int lane) {
  constexpr int LPR = D * 2 / 128;  // 128-byte lines per K/V row of one head
  if (p.kv_n_blocks <= 0) return;
  const int kv_len = max(0, min(p.seq_lens_k[b], p.kv_capacity));
  const int units = (kv_len + 63) / 64;
  const int per = max(1, (units + p.n_split - 1) / p.n_split);
  const int k_begin = split * per * 64, k_end = min(kv_len, k_begin + per * 64);
  const int32_t* bt_row = p.block_table + int64_t(b) * p.max_blocks_per_seq;
  const int64_t row_stride = int64_t(p.n_kv_head) * D;
  for (int i = 0; i < p.l2_prefetch_tiles; ++i) {
    const int key0 = k_begin + (warp + i * W) * TK;
    const int n_valid = min(TK, k_end - key0);
    if (n_valid <= 0) break;
    const int blk = min(max(bt_row[key0 / p.block_size], 0), p.kv_n_blocks - 1);
    const int64_t base = ((int64_t(blk) * p.block_size + key0 % p.block_size) * p.n_kv_head + hk) * D;
    for (int c = lane; c < n_valid * LPR; c += 32) {
      const int64_t off = base + (c / LPR) * row_stride + (c % LPR) * 64;
      prefetch_l2(p.k + off);
      prefetch_l2(p.v + off);
    }
  }
}

// Arrival on a (sequence, kv head) counter [CTR_MAGIC:32 | count:32] by one thread of the CTA; returns true for
// the n-th arrival, which resets the word to MAGIC|0 for the next launch. Steady state: one atomicAdd (a
// compare-and-swap loop here serialised ~16 arrivals into ~8 us, measured) with acquire-release semantics, so
// that no thread needs a fence of its own: the CTA barrier before the call orders every thread's partial stores
// before the release (cumulative), the one after it orders the acquire before every thread's partial loads
// (measured -0.2..-0.4 us per batch-1 call against fence.sc by every thread before and after a relaxed add:
// bench/RESULTS.md session 12). A word without the magic (the workspace's first use: fresh or poisoned) means
// the add landed on garbage: the arrival is redone by compare-and-swap, which replaces the garbage by MAGIC|1 (so
// that add is never counted) or counts on a word another arrival already replaced; then a fence (acquire).
__device__ __forceinline__ bool arrive_last(unsigned long long* ctr, unsigned n) {
  unsigned long long v = atom_add_acq_rel_gpu(ctr, 1ull);
  unsigned count;
  if ((v >> 32) == CTR_MAGIC) {
    count = unsigned(v) + 1;
  } else {
    v += 1;  // the value our add left, the likeliest current one
    for (;;) {
      const unsigned long long nv = (v >> 32) == CTR_MAGIC ? v + 1 : (CTR_MAGIC << 32) | 1ull;
      const unsigned long long prev = atomicCAS(ctr, v, nv);
      if (prev == v) {
        count = unsigned(nv);
        break;
      }
      v = prev;
    }
    __threadfence();
  }
  if (count < n) return false;
  atomicExch(ctr, CTR_MAGIC << 32);
  return true;
}

__device__ __forceinline__ void store_bf16x4(bf16* dst, float4 v) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(dst) = u;
}

// Split combine, one (head, 4 dims) item: merges one split's partial (LSE l in log2 units, 4 output dims v)
// into the running max m, sum and acc; a split without keys (l = -inf) adds nothing.
__device__ __forceinline__ void merge_split(float l, const float4& v, float& m, float& sum, float4& acc) {
  if (l == -INFINITY) return;
  const float m_new = fmaxf(m, l);
  const float a = exp2_mufu(m - m_new);  // 0 on the first split (m = -inf)
  const float w = exp2_mufu(l - m_new);
  sum = fmaf(sum, a, w);
  acc.x = fmaf(acc.x, a, w * v.x);
  acc.y = fmaf(acc.y, a, w * v.y);
  acc.z = fmaf(acc.z, a, w * v.z);
  acc.w = fmaf(acc.w, a, w * v.w);
  m = m_new;
}

// The combined item out: 4 dims of head `head` normalised (bf16), and the head's LSE (natural log) once.
template <int D>
__device__ __forceinline__ void store_merged(const DecodeParams& p, int64_t head, int d, float m, float sum,
                                             const float4& acc) {
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  store_bf16x4(p.out + head * D + d, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
  if (p.lse && d == 0) p.lse[head] = sum > 0.f ? (m + log2f(sum)) * LN2 : -INFINITY;
}

}  // namespace
}  // namespace mk::cuda::attn
