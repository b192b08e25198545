// The weight ring (version 4): warp 15 of every block streams the weight rows of the block's
// instructions, in queue order and across steps, into a ring of shared-memory pages with 1-D bulk
// copies (cp.async.bulk, completing on mbarriers); the consumer warps compute matvecs from the pages and
// release them. Weights never depend on activations, so the loader runs ahead through every dependency
// wait of the consumers: the wait bubbles are filled with weight traffic, and after a wait the next
// instruction's first pages are already in shared memory.
//
// Protocol (one block): page n (counted from 0 over the whole launch, the same sequence on both sides)
// lives in slot n % n_pages. full[slot] completes phase n / n_pages when page n has landed: 1 arrival (the
// loader's arrive.expect_tx) plus the copies' bytes; empty[slot] (count WARPS: lane 0 of every consumer
// warp, also warps without a row in the page) completes phase n / n_pages when every consumer warp is
// done reading it, and the loader waits for that before refilling the slot with page n + n_pages.
// Every consumer warp walks every page (so the arrival counts match), computing the row pairs that
// belong to it: pair q of an instruction goes to warp q % WARPS.
// Measured alternatives (bench/RESULTS.md, removed in version 9): a cp.async loader (one warp of 16-byte
// LDGSTS) makes the consumers' publishing fence cheap but cannot stream at the SM's share of DRAM bandwidth
// (1.63 vs 1.13 ms/token); an L2 run-ahead of 4-32 pages beyond the ring is slower (1.29-1.61 ms/token), as
// the sync-bubbles study found for L2 prefetch streams.
// Version 10: the dynamic LM head, version 11 also dynamic MlpGateUp and MlpDown (loader_dynamic): a dynamic
// instruction's pages hold the rows the loader names in s_dyn_row (its static units, then units claimed from a global counter; an empty
// page ends the instruction), so the last quarter of the stage goes to whichever SMs stream fastest.
#pragma once
#include <cuda_bf16.h>

#include "cuda/common/mbarrier.cuh"
#include "megakernel/device/params.cuh"

namespace mk::megakernel::device {

// mbarrier / bulk-copy wrappers: the shared set (cuda/common/mbarrier.cuh).
using mk::cuda::bulk_load;
using mk::cuda::mbar_arrive;
using mk::cuda::mbar_arrive_expect_tx;
using mk::cuda::mbar_init;
using mk::cuda::mbar_test_wait;
using mk::cuda::mbar_try_wait;
using mk::cuda::smem_u32;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ bool error_raised(const MkParams& p) {
  return *reinterpret_cast<volatile const uint32_t*>(p.error) != 0;
}

// Waits for an mbarrier phase. Gives up (returns) once another block raised the watchdog error, so a
// stuck step ends as an error instead of a hang (the caller's results are then discarded).
__device__ __forceinline__ void mbar_wait_or_error(const MkParams& p, uint64_t* bar, uint32_t parity) {
  for (uint32_t polls = 0; !mbar_try_wait(bar, parity); ++polls)
    if ((polls & 1023u) == 1023u && error_raised(p)) return;
}

// The weight rows an instruction multiplies: n rows of `cols` bf16, row i at base + i * stride; its
// output row i is row0 + i. n = 0: the instruction streams no weights (attention partial, argmax).
struct WeightRows {
  const bf16* base = nullptr;
  int64_t stride = 0;
  int cols = 0, n = 0, row0 = 0;
};

__device__ __forceinline__ WeightRows weight_rows(const MkParams& p, const Instr& in) {
  const Layout& L = p.L;
  const MkLayer& w = p.layers[in.layer];
  const int r0 = int(in.row_begin), n = int(in.row_end) - r0;
  WeightRows r;
  switch (in.op) {
    case Op::QkvProj: r = {w.wqkv + int64_t(r0) * L.n_embd, L.n_embd, L.n_embd, n, r0}; break;
    case Op::AttnOProj: {
      const int gh = L.group * L.head_dim, q_dim = L.n_head * L.head_dim;
      r = {w.wo + int64_t(r0) * q_dim + int64_t(in.group) * gh, q_dim, gh, n, r0};
      break;
    }
    case Op::MlpGateUp: r = {w.w_gate_up + 2 * int64_t(r0) * L.n_embd, L.n_embd, L.n_embd, 2 * n, 2 * r0}; break;
    case Op::MlpDown: r = {w.w_down + int64_t(r0) * L.n_ff, L.n_ff, L.n_ff, n, r0}; break;
    case Op::LmHead: r = {p.lm_head + int64_t(r0) * L.n_embd, L.n_embd, L.n_embd, n, r0}; break;
    default: break;
  }
  return r;
}

// Rows per page: whole rows, an even number when two fit (consumers take rows in pairs).
__device__ __forceinline__ int rows_per_page(int cols) { return page_rows(cols); }

// Dynamic stages (isa.h DynUnits: the LM head since version 10, MlpGateUp and MlpDown since version 11;
// MkParams::lm_dynamic / gu_dynamic / dn_dynamic): the loader tells the consumers which weight rows each page of a
// dynamic instruction holds (written before the page's arrive, whose release the consumers' wait acquires; s_dyn_row -1: the instruction's last, empty
// page), and the consumers tell the loader that they entered the dynamic instruction of (launch step s, stage k) by
// setting s_dyn_gate = dyn_gate(s, k) (the loader claims units only then). Stage k: 2 l for MlpGateUp of layer l,
// 2 l + 1 for its MlpDown, 2 n_layer for the LM head, so the gate grows monotonically through a launch.
__shared__ int s_dyn_row[MAX_PAGES];   // first weight row of the page in the slot
__shared__ int s_dyn_rows[MAX_PAGES];  // weight rows in it
__shared__ int s_dyn_gate;
__device__ __forceinline__ int dyn_gate(const Layout& L, int step, int stage) { return step * (2 * L.n_layer + 1) + stage + 1; }
// The gate's accesses: a release store by consumer thread 0 (after its dependency wait's acquire), an acquire load by
// the loader (before its claims), so the other blocks' claims of the step before precede this block's in causality
// order (their claim, their page's arrive, their consumers' release, thread 0's acquire, this release, this acquire).
// For MlpGateUp / MlpDown of layer l that chain is the step barrier (the flag protocol: the only one that runs them
// dynamic); each (stage, layer) has its own counter, so no chain between the stages of one step is needed.
__device__ __forceinline__ void dyn_gate_set(int v) {
  asm volatile("st.release.cta.shared.b32 [%0], %1;" ::"r"(smem_u32(&s_dyn_gate)), "r"(v) : "memory");
}
__device__ __forceinline__ int dyn_gate_get() {
  int v;
  asm volatile("ld.acquire.cta.shared.b32 %0, [%1];" : "=r"(v) : "r"(smem_u32(&s_dyn_gate)) : "memory");
  return v;
}

// Loader: waits until ring slot `page % np` is free (every consumer warp released page - np). False after
// another block raised the watchdog error (the caller returns).
__device__ __forceinline__ bool loader_slot(const MkParams& p, uint64_t* empty, uint32_t page, uint32_t np,
                                            unsigned long long& stall) {
  if (page < np) return true;
  const uint32_t slot = page % np, parity = ((page / np) - 1u) & 1u;
  if (mbar_test_wait(&empty[slot], parity)) return true;
  const unsigned long long t0 = p.timing ? global_ns() : 0;
  mbar_wait_or_error(p, &empty[slot], parity);
  if (p.timing) stall += global_ns() - t0;
  return !error_raised(p);
}

// Loader: the bulk copies of one page of nr rows (row k at src + k * stride) into `slot`.
__device__ __forceinline__ void loader_issue(unsigned char* ring, uint64_t* full, uint32_t slot, const bf16* src,
                                             int nr, uint32_t row_bytes, int64_t stride, bool contiguous,
                                             uint64_t policy, int lane) {
  const uint32_t bytes = uint32_t(nr) * row_bytes;
  unsigned char* dst = ring + size_t(slot) * PAGE_BYTES;
  if (lane == 0) mbar_arrive_expect_tx(&full[slot], bytes);
  __syncwarp();
  if (contiguous) {  // one region: pieces of 8 KB over the lanes
    constexpr uint32_t PIECE = 8192;
    for (uint32_t off = uint32_t(lane) * PIECE; off < bytes; off += 32u * PIECE)
      bulk_load(dst + off, reinterpret_cast<const unsigned char*>(src) + off, min(PIECE, bytes - off), &full[slot], policy);
  } else {  // strided rows (a kv group's columns of wo): one copy per row
    for (int k = lane; k < nr; k += 32)
      bulk_load(dst + size_t(k) * row_bytes, src + int64_t(k) * stride, row_bytes, &full[slot], policy);
  }
}

// One dynamic instruction's weights (isa.h DynUnits): unit u is the weight rows [mult * unit_begin(u), mult *
// unit_end(u)) of w (row r at w + r * cols; mult 2: MlpGateUp's interleaved gate/up rows); claims from *claim, whose
// value at this step's first claim is `base`; the consumers open `gate` when they enter the instruction.
struct DynSource {
  const DynUnits* D;
  const bf16* w;
  int cols, mult, slice, gate;
  unsigned long long* claim;
  unsigned long long base;
};

__device__ __forceinline__ DynSource dyn_source(const MkParams& p, const Instr& in, int step) {
  const Layout& L = p.L;
  if (in.op == Op::LmHead)
    return {&L.lm, p.lm_head, L.n_embd, 1, int(in.chunk), dyn_gate(L, step, 2 * L.n_layer), p.lm_claim,
            p.lm_base + (unsigned long long)step * (unsigned long long)L.lm.claims_per_step()};
  if (in.op == Op::MlpDown)
    return {&L.dn, p.layers[in.layer].w_down, L.n_ff, 1, int(in.chunk), dyn_gate(L, step, 2 * in.layer + 1),
            p.dn_claim + in.layer, p.dn_base + (unsigned long long)step * (unsigned long long)L.dn.claims_per_step()};
  return {&L.gu, p.layers[in.layer].w_gate_up, L.n_embd, 2, int(in.chunk), dyn_gate(L, step, 2 * in.layer),
          p.gu_claim + in.layer, p.gu_base + (unsigned long long)step * (unsigned long long)L.gu.claims_per_step()};
}

// Whether the loader streams this instruction as a dynamic one (the consumers decide alike; MlpGateUp and MlpDown
// only with flags: their consumer side is compiled into the flag instance only).
__device__ __forceinline__ bool dyn_op(const MkParams& p, Op op) {
  return (op == Op::LmHead && p.lm_dynamic) || (p.flags && ((op == Op::MlpGateUp && p.gu_dynamic) || (op == Op::MlpDown && p.dn_dynamic)));
}

// Loader, a dynamic instruction (DynSource): its static units, then (once this block's consumers entered the
// instruction) units claimed from the step's range of the counter until a claim overshoots, which ends the
// instruction with an empty page. A unit is streamed as whole pages. False: watchdog.
__device__ bool loader_dynamic(const MkParams& p, const DynSource& s, unsigned char* ring, uint64_t* full,
                               uint64_t* empty, uint32_t& page, unsigned long long& stall, uint64_t policy) {
  const DynUnits& D = *s.D;
  const int lane = threadIdx.x & 31, rpp = rows_per_page(s.cols);
  const uint32_t np = uint32_t(p.n_pages), row_bytes = uint32_t(s.cols) * 2u;
  auto unit_pages = [&](int unit) {
    const int r0 = unit < 0 ? 0 : s.mult * D.unit_begin(unit), r1 = unit < 0 ? 1 : s.mult * D.unit_end(unit);
    for (int r = r0; r < r1; r += rpp, ++page) {
      if (!loader_slot(p, empty, page, np, stall)) return false;
      const uint32_t slot = page % np;
      if (lane == 0) s_dyn_row[slot] = unit < 0 ? -1 : r, s_dyn_rows[slot] = unit < 0 ? 0 : min(rpp, r1 - r);
      if (unit < 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&full[slot]);
      } else {
        loader_issue(ring, full, slot, s.w + int64_t(r) * s.cols, min(rpp, r1 - r), row_bytes, s.cols, true, policy, lane);
      }
    }
    return true;
  };
  for (int k = 0; k < D.static_units; ++k) {
    const int u = D.static_unit(s.slice, k);
    if (u >= 0 && !unit_pages(u)) return false;
  }
  // Claims of this step only once the consumers are in the instruction: every instruction of this stage of the step
  // before has then made its last claim on every SM (see dyn_gate_set), so the counter is at this step's base.
  if (lane == 0)
    for (uint32_t polls = 0; dyn_gate_get() < s.gate; ++polls)
      if ((polls & 1023u) == 1023u && error_raised(p)) break;
  __syncwarp();
  if (error_raised(p)) return false;
  // One claim ahead: the next unit's atomic is in flight while this unit waits for its slot (a claim is an L2 round
  // trip). Still exactly one overshooting claim: nothing is claimed after a claim that overshot.
  unsigned long long cl = 0;
  if (lane == 0) cl = atomicAdd(s.claim, 1ull);
  for (;;) {
    cl = __shfl_sync(0xffffffffu, cl, 0);
    const long long c = (long long)(cl - s.base);
    if (c < 0 && lane == 0) atomicCAS(p.error, 0u, 2u);  // cannot happen: the claim ranges of the steps are apart
    const int unit = D.claimed_unit(c);
    if (unit >= 0 && lane == 0) cl = atomicAdd(s.claim, 1ull);
    if (!unit_pages(unit)) return false;
    if (unit < 0) return true;
  }
}

// The loader warp: every page of every instruction of this block's queue, n_steps times.
__device__ void run_loader(const MkParams& p, unsigned char* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  const uint32_t begin = p.queue_begin[blockIdx.x], end = p.queue_begin[blockIdx.x + 1];
  const uint64_t policy = mk::cuda::l2_evict_first_policy();
  const uint32_t np = uint32_t(p.n_pages);
  uint32_t page = 0;
  unsigned long long stall = 0;
  for (int step = 0; step < p.n_steps; ++step)
    for (uint32_t i = begin; i < end; ++i) {
      if (dyn_op(p, p.instrs[i].op)) {
        if (!loader_dynamic(p, dyn_source(p, p.instrs[i], step), ring, full, empty, page, stall, policy)) return;
        continue;
      }
      const WeightRows w = weight_rows(p, p.instrs[i]);
      if (w.n == 0) continue;
      const int rpp = rows_per_page(w.cols);
      const uint32_t row_bytes = uint32_t(w.cols) * 2u;
      for (int r = 0; r < w.n; r += rpp, ++page) {
        if (!loader_slot(p, empty, page, np, stall)) return;
        loader_issue(ring, full, page % np, w.base + int64_t(r) * w.stride, min(rpp, w.n - r), row_bytes, w.stride,
                     w.stride == w.cols, policy, lane);
      }
    }
  if (p.timing && lane == 0) p.timing[size_t(p.n_instr) * TIMING_FIELDS + size_t(blockIdx.x) * BLOCK_FIELDS + B_LOADER_STALL] = stall;
}

// Consumer side: waits until ring page c.page has landed (warp 0's wait counted in c.page_wait).
__device__ __forceinline__ uint32_t ring_wait_page(const Ctx& c) {
  const uint32_t np = uint32_t(c.p.n_pages), slot = c.page % np;
  if (!mbar_test_wait(&c.full[slot], (c.page / np) & 1u)) {
    const int warp = threadIdx.x >> 5;
    const unsigned long long t0 = (c.p.timing && warp == 0) ? global_ns() : 0;
    mbar_wait_or_error(c.p, &c.full[slot], (c.page / np) & 1u);
    if (c.p.timing && warp == 0) c.page_wait += global_ns() - t0;
  }
  return slot;
}

// Consumer side of ring page c.page (landed, in `slot`): its nr rows of `cols` bf16 times s_in, out(row0 + j, .)
// for row j by lane 0 of the warp that owns row pair j / 2 (pair q of the page goes to warp (pair_base + q) % WARPS:
// successive pages start where the last one ended); then this warp releases the page.
template <class Out>
__device__ __forceinline__ void ring_page_matvec(const Ctx& c, uint32_t slot, int cols, int nr, int row0, int pair_base,
                                                 const float* s_in, Out&& out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunks = cols / 8, row_u4 = cols / 8, n_pairs = (nr + 1) / 2;
  // Bank-conflict-free x reads: lanes with bit 2 set read the upper 4 floats of their 8 first.
  const int sw = (lane & 4) ? 4 : 0;
  const int first = ((warp - pair_base) % WARPS + WARPS) % WARPS;  // this warp's first pair in the page
  const uint4* pg = reinterpret_cast<const uint4*>(c.ring + size_t(slot) * PAGE_BYTES);
  for (int q = first; q < n_pairs; q += WARPS) {
    const int j = 2 * q;
    const bool two = j + 1 < nr;
    const uint4* w0 = pg + size_t(j) * row_u4;
    const uint4* w1 = two ? w0 + row_u4 : w0;
    float a0 = 0.f, a1 = 0.f;
#pragma unroll 2
    for (int ch = lane; ch < chunks; ch += 32) {
      const uint4 u0 = w0[ch], u1 = w1[ch];
      const float4 x0 = *reinterpret_cast<const float4*>(s_in + ch * 8 + sw);
      const float4 x1 = *reinterpret_cast<const float4*>(s_in + ch * 8 + 4 - sw);
      // weights of x0: elements sw..sw+3 (words z, w when sw = 4), of x1 the other half
      const uint32_t p0a = sw ? u0.z : u0.x, p0b = sw ? u0.w : u0.y, p0c = sw ? u0.x : u0.z, p0d = sw ? u0.y : u0.w;
      const uint32_t p1a = sw ? u1.z : u1.x, p1b = sw ? u1.w : u1.y, p1c = sw ? u1.x : u1.z, p1d = sw ? u1.y : u1.w;
      a0 += mk::cuda::bf16_lo(p0a) * x0.x + mk::cuda::bf16_hi(p0a) * x0.y + mk::cuda::bf16_lo(p0b) * x0.z +
            mk::cuda::bf16_hi(p0b) * x0.w + mk::cuda::bf16_lo(p0c) * x1.x + mk::cuda::bf16_hi(p0c) * x1.y +
            mk::cuda::bf16_lo(p0d) * x1.z + mk::cuda::bf16_hi(p0d) * x1.w;
      a1 += mk::cuda::bf16_lo(p1a) * x0.x + mk::cuda::bf16_hi(p1a) * x0.y + mk::cuda::bf16_lo(p1b) * x0.z +
            mk::cuda::bf16_hi(p1b) * x0.w + mk::cuda::bf16_lo(p1c) * x1.x + mk::cuda::bf16_hi(p1c) * x1.y +
            mk::cuda::bf16_lo(p1d) * x1.z + mk::cuda::bf16_hi(p1d) * x1.w;
    }
    a0 = mk::cuda::warp_sum(a0);
    a1 = mk::cuda::warp_sum(a1);
    if (lane == 0) {
      out(row0 + j, a0);
      if (two) out(row0 + j + 1, a1);
    }
  }
  // Release the page: every lane's reads of it are done (syncwarp orders them before lane 0's arrive).
  __syncwarp();
  if (lane == 0) mbar_arrive(&c.empty[slot]);
  ++c.page;
}

// Consumer side: out(row0 + i, sum_k W[i][k] * s_in[k]) for every row of `w`, read from the ring pages
// in the loader's order (called by all consumer warps; lane 0 of the owning warp calls out).
template <class Out>
__device__ void ring_matvec(const Ctx& c, const WeightRows& w, const float* s_in, Out&& out) {
  const int rpp = rows_per_page(w.cols);
  int pair_base = 0;
  for (int r = 0; r < w.n; r += rpp) {
    const int nr = min(rpp, w.n - r);
    ring_page_matvec(c, ring_wait_page(c), w.cols, nr, w.row0 + r, pair_base, s_in, out);
    pair_base += (nr + 1) / 2;
  }
}

// Consumer side of an instruction that may be dynamic (DynSource): with `dynamic`, the pages in the order the loader
// filled them (its static units, then its claims) until the empty page, each page's rows named by s_dyn_row /
// s_dyn_rows (max_pages bounds the loop: it only matters after a watchdog error, when a page wait gives up and the
// rows read are stale); else the static rows `w`, as ring_matvec. One loop for both, so that an op inlines
// ring_page_matvec once (two copies raised the kernel's register spills).
template <class Out>
__device__ void ring_dyn_matvec(const Ctx& c, bool dynamic, const WeightRows& w, int max_pages, const float* s_in, Out&& out) {
  const int rpp = rows_per_page(w.cols);
  for (int pair_base = 0, n = 0, k = 0; dynamic ? n <= max_pages : k < w.n; ++n, k += rpp) {
    const uint32_t slot = ring_wait_page(c);
    int r0 = w.row0 + k, nr = min(rpp, w.n - k);
    if (dynamic) {
      r0 = *reinterpret_cast<volatile int*>(&s_dyn_row[slot]);
      nr = r0 < 0 ? 0 : *reinterpret_cast<volatile int*>(&s_dyn_rows[slot]);
    }
    ring_page_matvec(c, slot, w.cols, nr, r0, pair_base, s_in, out);
    if (r0 < 0) break;
    pair_base += (nr + 1) / 2;
  }
}

// Pages of a dynamic stage's units (ring_dyn_matvec's bound).
__device__ __forceinline__ int dyn_max_pages(const DynUnits& D, int cols, int mult) {
  const int rpp = rows_per_page(cols);
  return D.units * ((mult * D.unit_rows + rpp - 1) / rpp);
}

}  // namespace mk::megakernel::device
