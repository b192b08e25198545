// On-device sampling of one token by one thread block or a grid: the host Sampler's rule (runtime/sampler.h) for a
// temperature with optional top-k, top-p and min-p (no repetition penalty), so that a decode loop on the device draws
// what the host loop would from the same logits, seed and draw index.
//   candidates x_i = (l_i - max finite l) / T in float (non-finite ones dropped); top-k and top-p keep the candidates
//   the host's filters keep (sample_select.cuh: a bound on their rank, found by a radix descent); min-p keeps
//   x_i >= log(min_p) (the largest candidate is 0 and top-k / top-p always keep it); the kept weights exp(x_i) in
//   double are walked in ascending id order; the first id whose running sum exceeds u * total is chosen,
//   u = philox_uniform(seed, draw); the last kept id if none does.
// Each thread owns a contiguous id range; the running sums are per-thread sums plus a block scan of them, so they
// differ from the host's one sequential sum by rounding only (a different id needs u * total within ~1e-15 of a
// boundary); top-p's masses likewise (sample_select.cuh). Test: tests/gpu/test_ops_sample.cu (against mk::Sampler).
#pragma once
#include <cstdint>

#include "core/philox.h"
#include "cuda/ops/sample.h"

namespace mk::cuda {

// Block reductions of the draw (block_sample and grid_sample).
namespace sample_detail {

__device__ inline float block_max(float v, float* s_f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // s_f may still be read by the previous reduction
  if (lane == 0) s_f[warp] = v;
  __syncthreads();
  v = s_f[0];
  for (int w = 1; w < nw; ++w) v = fmaxf(v, s_f[w]);
  return v;
}

__device__ inline int block_min_max_i(int v, bool want_max, int* s_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const int u = __shfl_xor_sync(0xffffffffu, v, o);
    v = want_max ? max(v, u) : min(v, u);
  }
  __syncthreads();
  if (lane == 0) s_i[warp] = v;
  __syncthreads();
  v = s_i[0];
  for (int w = 1; w < nw; ++w) v = want_max ? max(v, s_i[w]) : min(v, s_i[w]);
  return v;
}

// Exclusive block scan of per-thread sums in thread order (block_sample's arithmetic); total = the block's sum.
__device__ inline double block_scan(double local, double* s_d, double& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  double incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const double v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  __syncthreads();  // s_d may still be read by the previous scan
  if (lane == 31) s_d[warp] = incl;
  __syncthreads();
  double before = 0;
  total = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < warp) before += s_d[w];
    total += s_d[w];
  }
  return before + incl - local;
}

// The walk of the owner thread's ids from its running sum `prefix` to the first kept id past `target`; fallback when
// no thread owns it. Every thread calls it; all get the id.
template <class Weight>
__device__ inline int32_t block_walk(int owner, int fallback, double prefix, double target, int i0, int i1,
                                     Weight weight, int* s_pick) {
  if (threadIdx.x == 0) *s_pick = fallback;
  __syncthreads();
  if (int(threadIdx.x) == owner) {
    double run = prefix;
    for (int i = i0; i < i1; ++i) {
      const double w = weight(i);
      run += w;
      if (w > 0 && run > target) {
        *s_pick = i;
        break;
      }
    }
  }
  __syncthreads();
  return *s_pick;
}

}  // namespace sample_detail
}  // namespace mk::cuda

#include "cuda/ops/sample_select.cuh"

namespace mk::cuda {

// Every thread of the block calls it (blockDim.x a multiple of 32, at most 1024); all get the id, or -1 when no
// logit is finite (the host Sampler's -1). rule: temperature > 0, the others in their ranges (sampling.h).
__device__ inline int32_t block_sample(const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                                       uint64_t draw) {
  using namespace sample_detail;
  __shared__ float s_f[32];
  __shared__ double s_d[32];
  __shared__ int s_i[32], s_pick;
  __shared__ SelectSmem s_sel;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int per = (n_vocab + nt - 1) / nt, i0 = min(n_vocab, tid * per), i1 = min(n_vocab, i0 + per);
  const float T = rule.temperature;
  float m = -INFINITY;
  for (int i = i0; i < i1; ++i) {
    const float l = __ldg(logits + i);
    if (isfinite(l)) m = fmaxf(m, l);
  }
  m = block_max(m, s_f);
  if (m == -INFINITY) return -1;
  KeepBound kb;
  if (rule.top_k > 0 || rule.top_p < 1.f) {
    SelectCtx c{logits, n_vocab, m, T, 0, n_vocab, n_vocab, 1, {}};
    kb = select_keep(c, rule.top_k, rule.top_p, s_sel, s_d, s_i, &s_pick);
  }
  const double cut = rule.min_p > 0.f ? log(double(rule.min_p)) : -INFINITY;
  auto weight = [&](int i) {  // 0 for a dropped candidate (adds nothing, never chosen)
    const float x = candidate(__ldg(logits + i), m, T);
    return isfinite(x) && double(x) >= cut && kb.keeps(rank_key(x), i) ? exp(double(x)) : 0.0;
  };
  double local = 0;
  int last_kept = -1;
  for (int i = i0; i < i1; ++i) {
    const double w = weight(i);
    local += w;
    if (w > 0) last_kept = i;
  }
  double total = 0;
  const double prefix = block_scan(local, s_d, total);
  const double target = philox_uniform(seed, draw) * total;
  // The owner: the first thread whose range takes the running sum past the target.
  const int owner = block_min_max_i(prefix + local > target ? tid : nt, false, s_i);
  const int fallback = block_min_max_i(last_kept, true, s_i);  // the host's "u * total rounded up to total"
  return block_walk(owner, fallback, prefix, target, i0, i1, weight, &s_pick);
}

// ---- the same draw over a grid of blocks (CudaBackendOptions::sample_blocks) ----
constexpr int32_t GRID_SAMPLE_OTHER = -2;  // grid_sample's result in every block but the one that finished it

// block_sample's draw over gridDim.x blocks: block b sums the weights of its id range [b * chunk, (b + 1) * chunk)
// (per-thread ranges and a block scan, as block_sample); the last block to finish (a ticket on counter) scans the
// block sums in block order, finds the block whose range holds the target and walks that range again (gridDim.x <=
// blockDim.x). With top-k or top-p the blocks first find what they keep together (sample_select.cuh: every block must
// be resident at once). max_hint: the packed argmax of the logits (ops/matvec.h: its value is their max when all are
// finite); null or non-finite: every block finds the finite max itself. Returns the id (or -1) in the finishing
// block, GRID_SAMPLE_OTHER elsewhere. sc: all zero before the call, and so after it.
__device__ inline int32_t grid_sample(const float* logits, int n_vocab, const SampleRule& rule, uint64_t seed,
                                      uint64_t draw, const unsigned long long* max_hint, GridSampleScratch sc) {
  using namespace sample_detail;
  __shared__ float s_f[32];
  __shared__ double s_d[32];
  __shared__ int s_i[32];
  __shared__ int s_last, s_pick;
  __shared__ double s_pref;
  __shared__ SelectSmem s_sel;
  const int tid = threadIdx.x, nt = blockDim.x, G = gridDim.x, b = blockIdx.x;
  const float T = rule.temperature;
  float m = NAN;
  if (max_hint) {
    const uint32_t key = uint32_t(*max_hint >> 32);  // argmax_pack's order-preserving key, inverted
    m = __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
  }
  if (!isfinite(m)) {
    m = -INFINITY;
    for (int i = tid; i < n_vocab; i += nt) {
      const float l = logits[i];
      if (isfinite(l)) m = fmaxf(m, l);
    }
    m = block_max(m, s_f);
  }
  if (m == -INFINITY) return b == 0 ? -1 : GRID_SAMPLE_OTHER;
  const int chunk = (n_vocab + G - 1) / G;
  KeepBound kb;
  int n_levels = 0;  // selection histograms used (the finishing block clears them)
  if (rule.top_k > 0 || rule.top_p < 1.f) {
    SelectCtx c{logits, n_vocab, m, T, min(n_vocab, b * chunk), min(n_vocab, (b + 1) * chunk), chunk, G, sc};
    kb = select_keep(c, rule.top_k, rule.top_p, s_sel, s_d, s_i, &s_pick);
    n_levels = c.n_levels;
  }
  const double cut = rule.min_p > 0.f ? log(double(rule.min_p)) : -INFINITY;
  auto weight = [&](int i) {
    const float x = candidate(logits[i], m, T);
    return isfinite(x) && double(x) >= cut && kb.keeps(rank_key(x), i) ? exp(double(x)) : 0.0;
  };
  int i0 = 0, i1 = 0, last_kept = -1;
  auto block_range = [&](int bb) {  // this thread's ids of block bb's range, and their weight sum
    const int lo = min(n_vocab, bb * chunk), len = min(n_vocab, lo + chunk) - lo, per = (len + nt - 1) / nt;
    i0 = lo + min(len, tid * per), i1 = lo + min(len, tid * per + per), last_kept = -1;
    double local = 0;
    for (int i = i0; i < i1; ++i) {
      const double w = weight(i);
      local += w;
      if (w > 0) last_kept = i;
    }
    return local;
  };
  double local = block_range(b), total = 0;
  block_scan(local, s_d, total);
  const int kept = block_min_max_i(last_kept, true, s_i);
  if (tid == 0) {
    sc.part[b] = total;
    sc.kept[b] = kept;
    // The ticket releases the sums above and acquires the other blocks' (no fences: device.cuh); the barrier below
    // orders the last block's reads after thread 0's acquire.
    s_last = atom_add_acq_rel_gpu(sc.counter, 1u) == unsigned(G - 1);
  }
  __syncthreads();
  if (!s_last) return GRID_SAMPLE_OTHER;
  // Every block has passed the selection's barriers: its scratch is cleared for the next draw.
  for (int i = tid; i < n_levels * 3 * SAMPLE_SELECT_BINS; i += nt) sc.hist[i] = 0;
  if (tid == 0 && n_levels > 0) *sc.barrier = 0;
  // The block sums in block order, one per thread (G <= blockDim.x): one L2 round trip, then a block scan.
  const double p = tid < G ? __ldcg(sc.part + tid) : 0.0;
  double sum = 0;
  const double before = block_scan(p, s_d, sum);
  const double target = philox_uniform(seed, draw) * sum;
  const int ob = block_min_max_i(tid < G && before + p > target ? tid : nt, false, s_i);
  const int fb = block_min_max_i(tid < G ? __ldcg(sc.kept + tid) : -1, true, s_i);
  if (tid == ob) s_pref = before;
  if (tid == 0) *sc.counter = 0;  // for the next call
  __syncthreads();
  if (ob == nt) return fb;
  local = block_range(ob);  // the same sums block ob computed
  double unused;
  const double pre = s_pref + block_scan(local, s_d, unused);
  const int owner = block_min_max_i(pre + local > target ? tid : nt, false, s_i);
  return block_walk(owner, fb, pre, target, i0, i1, weight, &s_pick);
}

}  // namespace mk::cuda
