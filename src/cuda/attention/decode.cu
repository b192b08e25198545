// Split-KV decode attention (flash-decoding) over the paged cache, one query token per sequence, in ONE kernel.
// CTA = (split, kv head [x 16-head chunk], sequence), 4 warps. The split's keys are cut into tiles (64 keys at
// D=64, 32 at D=128: 16 KB of K+V; the 8-warp build halves them); warp w takes tiles w, w+4, ... and streams
// them through its own 3-stage cp.async ring in shared memory (no CTA barrier in the main loop; ~128 KB per SM
// in flight; one 192 KB CTA per SM). S = Q K^T and
// O += P V run on mma.sync m16n8k16 with the group's query heads as the 16 M rows, so one K/V load serves all
// of them (GQA). The warps combine in shared memory; with several splits each CTA writes a partial (O, LSE)
// and the last CTA of its (sequence, kv head) to arrive, found by a counter in the workspace, combines them:
// no second kernel. PDL: griddepcontrol.wait before the first global read, dependents released right after.
// AttentionOptions::decode_tma (head dim 64): lane 0 of a warp loads each K and V tile with one TMA tensor copy
// completing on a per-stage mbarrier instead of every lane's 16-byte cp.async (decode_kernel_tma).
// Reference: cpu::attention_prefill with q_len = 1; test: tests/gpu/test_attention_decode.cu; measured figures
// and the remaining gap: bench/RESULTS.md ("Decode attention v3" .. "v6").
// Files: decode_device.cuh (helpers), decode_kernel.cuh (the kernel), this file (launch configuration and the
// entry points of attn_internal.h).
#include <algorithm>

#include "cuda/attention/decode_kernel.cuh"
#include "cuda/attention/trace_arm.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/sm_count.h"

namespace mk::cuda::attn {
namespace {

// Dynamic shared memory: the ring, then (AttentionDecodeArgs::rope) the CTA's query heads in bf16. Sized to the
// heads a CTA has: with the ring, the static arrays and the 1 KB reserved per CTA the 4-warp build then stays within
// the SM's 196 KB shared-memory carveout (up to 8 heads at head dim 128). A kernel needing the 228 KB carveout cannot
// share an SM with kernels running under another one, which cost the decode step 10% on the H200 when this took
// 16 heads' room (bench/RESULTS.md, session 8).
template <int D>
constexpr int rope_q_bytes_max() { return HROWS * D * 2; }
template <int D>
int rope_q_bytes(const DecodeParams& p) { return p.rope.qkv ? std::min(p.group, HROWS) * D * 2 : 0; }

}  // namespace

bool decode_rope_fits_carveout(int group, int head_dim) {
  constexpr int CARVEOUT = 196 * 1024;  // the carveout the 4-warp, one-CTA-per-SM build runs under without rope
  constexpr int STATIC_AND_RESERVED = 2048;  // the kernel's static arrays (< 1 KB) and the 1 KB reserved per CTA
  const int ring = head_dim == 64 ? smem_bytes<64, 4, 1>() : smem_bytes<128, 4, 1>();
  return ring + std::min(group, HROWS) * head_dim * 2 + STATIC_AND_RESERVED <= CARVEOUT;
}

namespace {

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaError_t set_attrs() {
  constexpr int smem = smem_bytes<D, W, CPS>() + rope_q_bytes_max<D>();
  static bool attr_set = false;  // raise the dynamic shared-memory limit (and allow 16-CTA clusters) once
  if (!attr_set) {
    const auto k = decode_kernel<D, W, CPS, TWO, EARLY, CL>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess && CL) e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  return cudaSuccess;
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaLaunchConfig_t make_cfg(const DecodeParams& p, cudaStream_t s, bool pdl, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(p.n_split, p.n_kv_head * ((p.group + HROWS - 1) / HROWS), p.batch);
  cfg.blockDim = dim3(32 * W);
  cfg.dynamicSmemBytes = smem_bytes<D, W, CPS>() + rope_q_bytes<D>(p);
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (CL) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = unsigned(p.n_split);
    attr[1].val.clusterDim.y = attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  return cfg;
}

// Clusters of n_split (2 .. 16) CTAs of this build that the device holds at once, cached per split count.
template <int D, int CPS, bool TWO, bool EARLY>
int cluster_cap(int n_split) {
  static int cap[17] = {};  // cap + 1; 0 = not yet queried
  if (n_split < 2 || n_split > 16) return 0;
  if (cap[n_split] == 0) {
    int n = 0;
    if (set_attrs<D, 4, CPS, TWO, EARLY, true>() == cudaSuccess) {
      DecodeParams p{};
      p.n_split = n_split;
      p.n_kv_head = p.group = p.batch = 1;
      cudaLaunchAttribute attr[2];
      const cudaLaunchConfig_t cfg = make_cfg<D, 4, CPS, TWO, EARLY, true>(p, nullptr, true, attr);
      if (cudaOccupancyMaxActiveClusters(&n, decode_kernel<D, 4, CPS, TWO, EARLY, true>, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();  // a refused query is not a launch error: fall back to the counter combine
        n = 0;
      }
    }
    cap[n_split] = n + 1;
  }
  return cap[n_split] - 1;
}

template <int D, int W, int CPS, bool TWO, bool EARLY, bool CL>
cudaError_t launch_t(const DecodeParams& p, cudaStream_t s, bool pdl) {
  if constexpr (CL) {
    // Use clusters only where one wave of them fits (else the counter combine: a cluster that must wait for a
    // whole GPC's worth of free SMs would add a wave) or the grid is several waves anyway.
    const int cap = cluster_cap<D, CPS, TWO, EARLY>(p.n_split);
    const int64_t clusters = int64_t(p.n_kv_head) * ((p.group + HROWS - 1) / HROWS) * p.batch;
    const int64_t slots = int64_t(sm_count()) * CPS;
    if (cap <= 0 || (cap < clusters && int64_t(cap) * p.n_split * 8 < slots * 7))
      return launch_t<D, W, CPS, TWO, EARLY, false>(p, s, pdl);
  }
  const cudaError_t e = set_attrs<D, W, CPS, TWO, EARLY, CL>();
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = make_cfg<D, W, CPS, TWO, EARLY, CL>(p, s, pdl, attr);
  return cudaLaunchKernelEx(&cfg, decode_kernel<D, W, CPS, TWO, EARLY, CL>, p);
}

template <int D, int W, int CPS, bool EARLY, bool CL = false>
cudaError_t launch_two(const DecodeParams& p, cudaStream_t s, bool pdl) {
  return p.group > 8 ? launch_t<D, W, CPS, true, EARLY, CL>(p, s, pdl) : launch_t<D, W, CPS, false, EARLY, CL>(p, s, pdl);
}

template <int D, int CPS>
cudaError_t launch_w4(const DecodeParams& p, cudaStream_t s, const DecodeLaunch& l) {
  const bool cl = l.cluster && p.n_split >= 2 && p.n_split <= 16;
  if (cl) return l.early_kv ? launch_two<D, 4, CPS, true, true>(p, s, l.pdl) : launch_two<D, 4, CPS, false, true>(p, s, l.pdl);
  return l.early_kv ? launch_two<D, 4, CPS, true>(p, s, l.pdl) : launch_two<D, 4, CPS, false>(p, s, l.pdl);
}

// The TMA build (head dim 64, 4 warps, one CTA per SM, counter combine): K / V tensor maps over the pools
// [kv_n_blocks * block_size rows, n_kv_head, 64] with a box of one tile (TK rows of one head).
// 128-byte L2 promotion: one K/V row of a head is 128 bytes (256 fetched the neighbouring head's row too and
// measured 4-7% slower).
template <int TS, bool TWO, bool EARLY>
cudaError_t launch_tma_t(const DecodeParams& p, cudaStream_t s, bool pdl) {
  constexpr int l2_promotion = 128;
  constexpr int smem = smem_bytes_tma<TS>();
  const auto k = decode_kernel_tma<TS, TWO, EARLY>;
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  CUtensorMap tm_k, tm_v;
  const int64_t rows = int64_t(p.kv_n_blocks) * p.block_size;
  cudaError_t e = make_tensor_map_3d(&tm_k, p.k, 64, p.n_kv_head, rows, tma_tile_keys<TS>(), l2_promotion);
  if (e == cudaSuccess) e = make_tensor_map_3d(&tm_v, p.v, 64, p.n_kv_head, rows, tma_tile_keys<TS>(), l2_promotion);
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = make_cfg<64, 4, 1, TWO, EARLY, false>(p, s, pdl, attr);
  cfg.dynamicSmemBytes = smem;
  return cudaLaunchKernelEx(&cfg, k, p, tm_k, tm_v);
}

template <int TS>
cudaError_t launch_tma(const DecodeParams& p, cudaStream_t s, const DecodeLaunch& l) {
  if (p.group > 8)
    return l.early_kv ? launch_tma_t<TS, true, true>(p, s, l.pdl) : launch_tma_t<TS, true, false>(p, s, l.pdl);
  return l.early_kv ? launch_tma_t<TS, false, true>(p, s, l.pdl) : launch_tma_t<TS, false, false>(p, s, l.pdl);
}

template <int D>
cudaError_t launch_d(const DecodeParams& p, cudaStream_t s, const DecodeLaunch& l) {
  if constexpr (D == 64) {  // decode_tma: 1 = 64-key tiles x 3 stages, 2 = 32-key tiles x 6 stages
    if (l.tma == 1) return launch_tma<3>(p, s, l);
    if (l.tma == 2) return launch_tma<6>(p, s, l);
  }
  if (l.warps == 8) return launch_two<D, 8, 1, false>(p, s, l.pdl);  // (no EARLY build: a measured variant only)
  return l.ctas_per_sm == 2 ? launch_w4<D, 2>(p, s, l) : launch_w4<D, 1>(p, s, l);
}

}  // namespace

cudaError_t launch_decode(const DecodeParams& p, int head_dim, cudaStream_t s, const DecodeLaunch& l) {
  DecodeParams q = p;
  if (q.early_stages <= 0)  // the whole ring before the wait where it measured faster (head dim 64, 192 KB ring)
    q.early_stages = l.tma > 0 ? DECODE_TMA_EARLY_STAGES : head_dim == 64 && l.ctas_per_sm == 1 && l.warps == 4 && !l.cluster ? 3 : 2;
  return head_dim == 64 ? launch_d<64>(q, s, l) : launch_d<128>(q, s, l);
}

cudaError_t decode_trace_arm(void* buf, size_t bytes) {
#if MK_DECODE_TRACE
  const unsigned zero = 0;
  cudaError_t e = arm_trace_symbols(g_trace, g_trace_cap, buf, bytes);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_trace_ticket, &zero, sizeof(zero));
  return e;
#else
  (void)buf;
  (void)bytes;
  return cudaErrorNotSupported;
#endif
}

int decode_cluster_capacity(int head_dim, int n_split, int ctas_per_sm, bool two_rows) {
  if (head_dim == 64)
    return ctas_per_sm == 2 ? (two_rows ? cluster_cap<64, 2, true, false>(n_split) : cluster_cap<64, 2, false, false>(n_split))
                            : (two_rows ? cluster_cap<64, 1, true, false>(n_split) : cluster_cap<64, 1, false, false>(n_split));
  return ctas_per_sm == 2 ? (two_rows ? cluster_cap<128, 2, true, false>(n_split) : cluster_cap<128, 2, false, false>(n_split))
                          : (two_rows ? cluster_cap<128, 1, true, false>(n_split) : cluster_cap<128, 1, false, false>(n_split));
}

}  // namespace mk::cuda::attn
