// Decode matvec fed by bulk copies into a shared-memory ring (see matvec.h for the modes).
// Block = NW <= 8 consumer warps + 1 producer warp, one block per SM. W is cut into units of RPU whole rows
// (<= 16 KB, one contiguous byte range each); lane 0 of the producer warp claims units from a grid-wide counter
// (a first batch of S, then one at a time) and issues one cp.async.bulk per unit into a ring slot (completing on
// the slot's `full` mbarrier). It never waits on the previous kernel, so a ring's worth (up to ~96 KB per SM) of
// weights is requested before the kernel's own griddepcontrol.wait, with no register cost. Once its claims are
// exhausted it lets the next kernel launch (griddepcontrol.launch_dependents): that kernel's blocks fit beside
// ours (<= ~104 KB of shared memory each) and start streaming while our consumers drain the ring. Claims (not a
// static split) because a block may share its SM with another block of the same launch at a kernel boundary.
// BulkSched::CONTIGUOUS instead: block b takes units [b U / G, (b + 1) U / G) and lets the next kernel launch at
// its first instruction, while every SM holds one block of ours (see the kernel); no counter.
// Consumer warp w takes sequence numbers w, w + NW, ... (slot = number % S with S a multiple of NW, so a slot
// always belongs to the same warp and is waited on one phase at a time): waits on the slot's `full` barrier,
// computes its rows' dot products with x from shared memory (row pairs, lanes over 16-byte chunks, fixed order:
// deterministic), does the epilogue, and frees the slot through its `empty` barrier. x (* the RMSNorm weight) is
// staged once per block after the wait; the RMS scale is applied to the finished dot product.
// Optional l2_prefetch: the producer also asks the L2 to fetch a share of another buffer (the weights of a
// kernel that will start cold, e.g. the O projection behind the attention kernels).
// Status (H200, bench/RESULTS.md, layered rounds 3-5): opt-in (MK_MATVEC=bulk or bulk-auto). Alone it wins where one
// launch's rings hold the whole matrix (2048x2048 in a PDL graph 4.2 vs 5.1 us for split-K) and loses on large ones
// (2048x8192 16.1 vs 9.8 us); in the decode graph even bulk-auto made a step slower (1B 0.936 vs 0.862 ms).
// CONTIGUOUS (session 5, "bulk ring with contiguous ranges"): 2048x2048 2.99 us (62%) and 3072x2048 3.68 us in a
// PDL graph vs split-K 5.14 / 4.99, but 2048x8192 13.98 vs 10.21 (one warp per 16 KB row), and 1B decode with it
// where one launch holds W 0.8657 vs 0.7784 ms (the kernels before and after it cannot overlap with it). Tests
// pass (tests/gpu/test_ops_matvec.cu, test_backend.cu); racecheck reports hazards between the bulk writes of a slot
// and the consumers' reads, which only the mbarriers order (the pattern of CUTLASS's TMA pipelines) - unresolved.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/sm_count.h"
#include "cuda/ops/matvec_internal.h"

namespace mk::cuda {
namespace {

constexpr int MAX_NW = 8;                   // consumer warps at most
constexpr int MAX_THREADS = (MAX_NW + 1) * 32;  // + the producer warp
constexpr int UNIT_TARGET = 16 * 1024;   // bytes per unit (one bulk copy, one ring slot)
constexpr int UNIT_MAX = 32 * 1024;      // a row (a row pair in the paired modes) must fit one slot
constexpr int SMEM_TARGET = 104 * 1024;  // ring + x: two blocks (ours and the next kernel's) fit one SM
constexpr int RING_MAX = 96 * 1024;
constexpr int MAX_SLOTS = 16;
constexpr int CONSUMER_BAR = 1;          // named barrier id of the consumer threads

struct BulkParams {
  MatvecArgs a;
  int rpu;         // rows per unit
  int n_units;     // ceil(n_rows / rpu)
  int n_slots;     // ring depth S: S <= MAX_NW (then NW = S) or a multiple of MAX_NW
  int n_consumers;  // consumer warps NW (S % NW == 0)
  int sched;        // which pair of claim counters (see sched_counters)
  BulkSched sched_mode;  // how units are assigned to blocks (see BulkSched)
  int slot_bytes;  // >= rpu * n_cols * 2, multiple of 128
};

__device__ __forceinline__ void consumer_sync(int n_threads) {
  asm volatile("bar.sync %0, %1;" ::"n"(CONSUMER_BAR), "r"(n_threads) : "memory");
}

// Claim counters {next unit, blocks done}, zero between launches. Launches of the bulk kernel on one stream are
// serialised by their claims (the next launch starts only after every block of the previous one has made its last
// claim and the counters were reset), so one pair serves a stream; different streams use different pairs.
constexpr int N_SCHED = 64;
__device__ unsigned g_sched[N_SCHED][2];
__device__ __forceinline__ unsigned* sched_counters(int i) { return g_sched[i]; }

// This block's share of the L2 prefetch, in 16 KB requests.
__device__ __forceinline__ void prefetch_share(const MatvecArgs& a) {
  const size_t share = (a.l2_prefetch_bytes / gridDim.x + 15) / 16 * 16;
  const size_t b0 = share * blockIdx.x, b1 = b0 + share < a.l2_prefetch_bytes ? b0 + share : a.l2_prefetch_bytes;
  const unsigned char* src = static_cast<const unsigned char*>(a.l2_prefetch);
  for (size_t b = b0; b < b1; b += 16384) bulk_prefetch_l2(src + b, uint32_t(b1 - b < 16384 ? b1 - b : 16384));
}

template <MatvecOut MODE, bool NORM, bool ARGMAX, class XT>
__global__ void __launch_bounds__(MAX_THREADS, 2) matvec_bulk_kernel(const BulkParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: ring [n_slots][slot_bytes] | x [n_cols] f32 | full [n_slots] | empty [n_slots] (mbarriers) |
  // unit [n_slots] int.
  __shared__ float s_red[MAX_NW];
  __shared__ unsigned long long s_best[MAX_NW];
  const MatvecArgs& a = p.a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int S = p.n_slots, NW = p.n_consumers;
  const bool claims = p.sched_mode == BulkSched::CLAIM;
  // CONTIGUOUS: let the next kernel launch at once. Every SM holds exactly one block of ours now (none has finished),
  // so each takes exactly one block of the next launch beside ours, which streams its first ring's worth of
  // weights while ours drain; a block of the launch after that can only take the place of one of ours as it exits.
  if (p.sched_mode == BulkSched::CONTIGUOUS && threadIdx.x == 0) pdl_launch_dependents();
  float* s_x = reinterpret_cast<float*>(smem + size_t(S) * p.slot_bytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(s_x + a.n_cols);
  uint64_t* empty = full + S;
  const size_t row_bytes = size_t(a.n_cols) * 2;
  int* s_unit = reinterpret_cast<int*>(empty + S);  // [n_slots]: unit in the slot, -1 = no more work
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      mbar_init(&full[i], 1);   // the producer's arrive (+ the copy's bytes)
      mbar_init(&empty[i], 1);  // the consuming warp's arrive
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // barriers initialised; the last block-wide barrier (the producer leaves the consumers here)

  if (warp == NW) {  // ---- producer: never waits on the previous kernel (weights do not depend on it)
    if (lane == 0) {
      const uint64_t policy = l2_evict_first_policy();
      const unsigned char* w = reinterpret_cast<const unsigned char*>(a.w);
      // Units are claimed from a grid-wide counter (so an SM that got two of our blocks, or started late, just
      // claims less; and all SMs stream neighbouring parts of W): a first batch of S, then one at a time, the
      // next claim in flight while waiting for a free slot.
      unsigned* ctr = sched_counters(p.sched);
      int first = claims ? int(atomicAdd(&ctr[0], unsigned(S))) : -1;
      int claim = 0;
      // CONTIGUOUS: units [u_begin, u_end), a contiguous byte range of W per block.
      const int u_begin = int(size_t(blockIdx.x) * p.n_units / gridDim.x);
      const int u_end = int(size_t(blockIdx.x + 1) * p.n_units / gridDim.x);
      int i = 0;
      for (;; ++i) {
        int unit;
        if (p.sched_mode == BulkSched::CONTIGUOUS) {
          unit = u_begin + i < u_end ? u_begin + i : p.n_units;
        } else if (i < S) {
          unit = first + i;
        } else {
          unit = claim;
        }
        if (unit >= p.n_units) break;
        if (claims && i + 1 >= S) claim = int(atomicAdd(&ctr[0], 1u));  // used one iteration later
        const int slot = i % S;
        if (i >= S) mbar_wait(&empty[slot], uint32_t((i / S - 1) & 1));  // its previous unit consumed
        const int r0 = unit * p.rpu, nr = min(p.rpu, a.n_rows - r0);
        const uint32_t bytes = uint32_t(size_t(nr) * row_bytes);
        s_unit[slot] = unit;  // published by the arrive below (release) to the consumer's wait (acquire)
        mbar_arrive_expect_tx(&full[slot], bytes);
        bulk_load(smem + size_t(slot) * p.slot_bytes, w + size_t(r0) * row_bytes, bytes, &full[slot], policy);
        if (i == S - 1 && a.l2_prefetch_bytes) prefetch_share(a);
      }
      if (i < S && a.l2_prefetch_bytes) prefetch_share(a);
      // Every claim of ours is settled. The last block to get here resets the counters for the next launch (which
      // cannot start claiming before every block of ours has triggered below), then we let it launch: its blocks
      // fit beside ours and start filling their rings while our consumers drain.
      if (claims) {
        if (atomicAdd(&ctr[1], 1u) == gridDim.x - 1) {
          const unsigned a0 = atomicExch(&ctr[0], 0u), a1 = atomicExch(&ctr[1], 0u);
          if (a0 == 0xffffffffu && a1 == 0xffffffffu) ctr[1] = 0;  // never true: waits for the exchanges
          __threadfence();
        }
      }
      pdl_launch_dependents();
      // End markers: the next NW sequence numbers are one per consumer warp.
      for (int k = 0; k < NW; ++k, ++i) {
        const int slot = i % S;
        if (i >= S) mbar_wait(&empty[slot], uint32_t((i / S - 1) & 1));
        s_unit[slot] = -1;
        mbar_arrive(&full[slot]);
      }
    }
    return;
  }

  // ---- consumers (NW warps)
  const int tid = threadIdx.x, n_cons = NW * 32;
  if constexpr (NORM)
    for (int i = tid * 4; i < a.n_cols; i += n_cons * 4)
      *reinterpret_cast<float4*>(s_x + i) = *reinterpret_cast<const float4*>(a.norm_w + i);
  pdl_wait();  // x (and out, for ADD) come from the previous kernels
  float ss = stage_x<NORM, XT>(a, s_x, tid, n_cons);
  if constexpr (NORM) {
    ss = warp_sum(ss);
    if (lane == 0) s_red[warp] = ss;
  }
  consumer_sync(n_cons);  // s_x and s_red complete
  float inv = 1.f;
  if constexpr (NORM) {
    float t = 0.f;
    for (int k = 0; k < NW; ++k) t += s_red[k];
    inv = rsqrtf(t / float(a.n_cols) + a.eps);
  }

  const int cpr = a.n_cols >> 3;  // 16-byte chunks per row
  unsigned long long best = 0;
  for (int i = warp;; i += NW) {
    const int slot = i % S;
    mbar_wait(&full[slot], uint32_t((i / S) & 1));
    const int unit = s_unit[slot];
    if (unit < 0) break;
    const unsigned char* buf = smem + size_t(slot) * p.slot_bytes;
    const int r0 = unit * p.rpu, nr = min(p.rpu, a.n_rows - r0);
    for (int pr = 0; pr < nr; pr += 2) {
      const bool has1 = pr + 1 < nr;
      const uint4* w0 = reinterpret_cast<const uint4*>(buf + size_t(pr) * row_bytes);
      const uint4* w1 = has1 ? w0 + cpr : w0;  // odd last row: re-read row 0 (result unused)
      float acc0 = 0.f, acc1 = 0.f;
#pragma unroll 4
      for (int c = lane; c < cpr; c += 32) {
        dot8_pair(s_x + c * 8, w0[c], w1[c], acc0, acc1);
      }
      acc0 = warp_sum(acc0);
      acc1 = warp_sum(acc1);
      if (lane == 0) {
        store_row_pair<MODE, ARGMAX>(a, r0 + pr, has1, acc0 * inv, acc1 * inv, best);
      }
    }
    __syncwarp();  // every lane's reads of the slot are done before it is handed back
    if (lane == 0) mbar_arrive(&empty[slot]);
  }
  if constexpr (ARGMAX) argmax_commit(a.argmax, s_best, best, NW, [&] { consumer_sync(n_cons); });
}

bool paired(MatvecOut m) { return m == MatvecOut::SWIGLU || m == MatvecOut::ROPE_QKV; }

// Unit size and ring depth for a shape; rpu = 0 when unsupported.
BulkParams plan(const MatvecArgs& a) {
  BulkParams p{};
  p.a = a;
  const size_t rb = size_t(a.n_cols) * 2;
  const int min_rows = paired(a.mode) ? 2 : 1;
  if (rb * size_t(min_rows) > size_t(UNIT_MAX)) return p;
  int rpu = std::max<int>(min_rows, int(UNIT_TARGET / rb));
  rpu = std::min(rpu, 256);  // tiny rows: keep a unit's serial work per warp bounded
  if (rpu > 1) rpu &= ~1;    // units start on even rows (row pairs stay together)
  p.rpu = rpu;
  p.n_units = (a.n_rows + rpu - 1) / rpu;
  p.slot_bytes = int((size_t(rpu) * rb + 127) / 128 * 128);
  const int x_bytes = a.n_cols * 4;
  const int ring = std::min(RING_MAX, SMEM_TARGET - x_bytes);
  int slots = std::clamp(ring / p.slot_bytes, 2, MAX_SLOTS);
  // No more slots than a block has units (smaller footprint: more room for the neighbouring kernels).
  const int blocks = std::min(p.n_units, sm_count());
  slots = std::max(1, std::min(slots, (p.n_units + blocks - 1) / blocks));
  if (slots > MAX_NW) slots -= slots % MAX_NW;
  p.n_slots = slots;
  p.n_consumers = std::min(slots, MAX_NW);
  return p;
}

size_t smem_bytes(const BulkParams& p) {
  return size_t(p.n_slots) * p.slot_bytes + size_t(p.a.n_cols) * 4 + size_t(p.n_slots) * 20;
}

template <MatvecOut MODE, bool NORM, bool ARGMAX>
void launch_bulk(const Stream& s, const BulkParams& p) {
  const size_t smem = smem_bytes(p);
  auto kernel = p.a.x ? matvec_bulk_kernel<MODE, NORM, ARGMAX, float> : matvec_bulk_kernel<MODE, NORM, ARGMAX, bf16>;
  static size_t attr[2] = {0, 0};  // dynamic shared memory allowed so far, per instantiation
  size_t& allowed = attr[p.a.x ? 0 : 1];
  if (smem > allowed) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    allowed = smem;
  }
  const int blocks = std::min(p.n_units, sm_count());
  launch(s, dim3(blocks), dim3((p.n_consumers + 1) * 32), smem, kernel, p);
}

bool matvec_bulk_supported_impl(const MatvecArgs& a) {
  if (a.mode == MatvecOut::ROPE_QKV_NORM) return false;  // the per-head q/k norm: split-K kernel only
  const BulkParams p = plan(a);
  return p.rpu > 0 && smem_bytes(p) <= 227 * 1024 - 2 * 1024;
}

// A pair of claim counters per stream (launches on one stream are serialised by the kernel itself).
int sched_index(cudaStream_t s) {
  static std::mutex m;
  static std::map<cudaStream_t, int> ids;
  std::lock_guard<std::mutex> lock(m);
  auto it = ids.find(s);
  if (it != ids.end()) return it->second;
  MK_CHECK(int(ids.size()) < N_SCHED);
  const int id = int(ids.size());
  ids.emplace(s, id);
  return id;
}

BulkSched& bulk_sched() {
  static BulkSched v = [] {
    const char* e = std::getenv("MK_MATVEC_BULK_SCHED");
    const std::string n = e ? e : "";
    return n == "contiguous" ? BulkSched::CONTIGUOUS : BulkSched::CLAIM;
  }();
  return v;
}

}  // namespace

bool matvec_bulk_supported(const MatvecArgs& a) { return matvec_bulk_supported_impl(a); }

void set_matvec_bulk_sched(BulkSched s) { bulk_sched() = s; }

bool matvec_bulk_one_pass(const MatvecArgs& a) {
  const BulkParams p = plan(a);
  return p.rpu > 0 && p.n_units <= std::min(p.n_units, sm_count()) * p.n_slots;
}

void matvec_bulk(const Stream& s, const MatvecArgs& a) {
  BulkParams p = plan(a);
  p.sched = sched_index(s.stream);
  p.sched_mode = bulk_sched();
  MK_CHECK(p.rpu > 0);
  MK_CHECK(a.l2_prefetch_bytes == 0 || (a.l2_prefetch && reinterpret_cast<uintptr_t>(a.l2_prefetch) % 16 == 0));
  MK_CHECK(a.mode != MatvecOut::ROPE_QKV_NORM && "ROPE_QKV_NORM is served by the split-K kernel only");
  dispatch_matvec(a, [&]<MatvecOut MODE, bool NORM, bool ARGMAX>() {
    if constexpr (MODE != MatvecOut::ROPE_QKV_NORM) launch_bulk<MODE, NORM, ARGMAX>(s, p);
  });
}

}  // namespace mk::cuda
