// The weight ring (version 4): the last warp (LOADER_WARP) of every block streams the weight rows of the block's
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
// Version 10: the dynamic LM head (loader_lm_dynamic): an LmHead page's rows are the unit the loader names in
// s_lm_unit (its static units, then units claimed from a global counter; an empty page ends the instruction), so the
// last quarter of the LM head goes to whichever SMs stream fastest.
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


// The dynamic LM head (version 10, isa.h Layout::lm_unit_rows, MkParams::lm_dynamic): the loader tells the consumers
// which unit of the vocabulary each LmHead page holds (written before the page's arrive, whose release the
// consumers' wait acquires; -1: the instruction's last, empty page), and the consumers tell the loader that they
// entered the LmHead instruction of launch step s - 1 by setting s_lm_gate = s (the loader claims units only then).
__shared__ int s_lm_unit[MAX_PAGES];
__shared__ int s_lm_gate;
// Set (1) by consumer thread 0 when the block's consumers found a stop id as a step's input (isa.h StopIds) and leave:
// the loader stops waiting for pages they will never release, waits for the copies it issued, and returns.
// The loader functions take STOP = true in the kernel instances with stop ids only (the others compile as before).
__shared__ int s_stop;
__device__ __forceinline__ bool loader_stopped() { return *reinterpret_cast<volatile const int*>(&s_stop) != 0; }
// The gate's accesses: a release store by consumer thread 0 (after its dependency wait's acquire), an acquire load by
// the loader (before its claims), so the other blocks' claims of the step before precede this block's in causality
// order (their claim, their page's arrive, their consumers' release, thread 0's acquire, this release, this acquire).
__device__ __forceinline__ void lm_gate_set(int v) {
  asm volatile("st.release.cta.shared.b32 [%0], %1;" ::"r"(smem_u32(&s_lm_gate)), "r"(v) : "memory");
}
__device__ __forceinline__ int lm_gate_get() {
  int v;
  asm volatile("ld.acquire.cta.shared.b32 %0, [%1];" : "=r"(v) : "r"(smem_u32(&s_lm_gate)) : "memory");
  return v;
}

// The prefetch gate (MkParams::gate_pages): consumer thread 0 stores gate_seq(step, i) once the consumers have read
// instruction i's whole input (every SM finished the stage before it); the loader waits for it before issuing that
// instruction's pages past the first gate_pages (loader_gate). Why: at the end of a stage that streams at the DRAM's
// rate, the SMs that finished early prefetch the next instruction's pages and take bandwidth from the last SMs still
// streaming the stage, whose end every SM then waits for (H200, session 14: 5 ring pages slower than 4; with the gate
// the slowest SM's lateness in MlpGateUp fell 50 -> 39 us per step at 1B). Only timing hangs on it (no data is handed
// over); its accesses are the LM head gate's, as measured.
__shared__ uint32_t s_gate;
__device__ __forceinline__ uint32_t gate_seq(const MkParams& p, int step, uint32_t i) { return uint32_t(step) * p.n_instr + i + 1; }
// MlpGateUp too where attention is inline (session 19): gated everywhere it was −0.2% (1B) to −1.4% (Qwen3-0.6B) at
// ctx 32 but +0.8% at 1B 4096* (session 18 call 9), where split attention's stage ends differently.
__device__ __forceinline__ bool gated_op(const MkParams& p, Op op) {
  return op == Op::MlpDown || op == Op::QkvProj || (op == Op::MlpGateUp && p.L.n_chunks == 1);
}
__device__ __forceinline__ void gate_open(const MkParams& p, int step, uint32_t i) {
  if (p.gate_pages > 0 && threadIdx.x == 0)
    asm volatile("st.release.cta.shared.b32 [%0], %1;" ::"r"(smem_u32(&s_gate)), "r"(gate_seq(p, step, i)) : "memory");
}
__device__ __forceinline__ uint32_t gate_get() {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared.b32 %0, [%1];" : "=r"(v) : "r"(smem_u32(&s_gate)) : "memory");
  return v;
}

// The loader's place in the ring: page number, its slot (page % n_pages) and round (page / n_pages), kept as the
// pages go by rather than divided out per page (see Ctx::slot).
struct RingPos {
  uint32_t page = 0, slot = 0, round = 0;
  __device__ __forceinline__ void next(uint32_t np) {
    ++page;
    if (++slot == np) slot = 0, ++round;
  }
};

// Loader: waits until ring slot `at.slot` is free (every consumer warp released page at.page - np). False after
// another block raised the watchdog error (the caller returns), or (STOP) once the consumers stopped.
template <bool STOP>
__device__ __forceinline__ bool loader_slot(const MkParams& p, uint64_t* empty, const RingPos& at,
                                            unsigned long long& stall) {
  if (at.round == 0) return true;
  const uint32_t slot = at.slot, parity = (at.round - 1u) & 1u;
  if (mbar_test_wait(&empty[slot], parity)) return true;
  const unsigned long long t0 = p.timing ? global_ns() : 0;
  if constexpr (!STOP) {
    mbar_wait_or_error(p, &empty[slot], parity);
    if (p.timing) stall += global_ns() - t0;
    return !error_raised(p);
  }
  // As mbar_wait_or_error, and gives up when the consumers stopped (they release no more pages).
  bool ok = true;
  for (uint32_t polls = 0; !mbar_try_wait(&empty[slot], parity); ++polls)
    if (((polls & 1023u) == 1023u && error_raised(p)) || ((polls & 63u) == 63u && loader_stopped())) {
      ok = false;
      break;
    }
  if (p.timing) stall += global_ns() - t0;
  // One decision for the warp (loader_issue's __syncwarp needs every lane): a lane that gave up wins.
  return __all_sync(0xffffffffu, ok && !error_raised(p));
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

// Loader, dynamic LM head of launch step `step` (isa.h Layout::lm_unit_rows): the instruction's static units, then
// (once this block's consumers entered the instruction) units claimed from the step's range of the counter until
// a claim overshoots, which ends the instruction with an empty page. One unit = one page. False: watchdog (or STOP:
// the consumers stopped).
template <bool STOP>
__device__ bool loader_lm_dynamic(const MkParams& p, const Instr& in, int step, unsigned char* ring, uint64_t* full,
                                  uint64_t* empty, RingPos& at, unsigned long long& stall, uint64_t policy) {
  const Layout& L = p.L;
  const int lane = threadIdx.x & 31, ur = L.lm_unit_rows;
  const uint32_t np = uint32_t(p.n_pages), row_bytes = uint32_t(L.n_embd) * 2u;
  auto unit_page = [&](int unit) {
    if (!loader_slot<STOP>(p, empty, at, stall)) return false;
    const uint32_t slot = at.slot;
    if (lane == 0) s_lm_unit[slot] = unit;
    if (unit < 0) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&full[slot]);
    } else {
      const int r0 = unit * ur;
      loader_issue(ring, full, slot, p.lm_head + int64_t(r0) * L.n_embd, min(ur, L.n_vocab - r0), row_bytes, L.n_embd,
                   true, policy, lane);
    }
    at.next(np);
    return true;
  };
  for (int k = 0; k < L.lm_static; ++k) {
    const int u = int(in.chunk) * L.lm_static + k;
    if (u < L.lm_units && !unit_page(u)) return false;
  }
  // Claims of step `step` only once the consumers are in it: every LmHead instruction of the step before has then
  // made its last claim on every SM (the consumers passed a wait that follows the Argmax of that step), so the
  // counter is at this step's base.
  if (lane == 0)
    for (uint32_t polls = 0; lm_gate_get() != step + 1; ++polls)
      if (((polls & 1023u) == 1023u && error_raised(p)) || (STOP && loader_stopped())) break;
  __syncwarp();
  if constexpr (STOP) {
    if (__shfl_sync(0xffffffffu, int(error_raised(p) || loader_stopped()), 0)) return false;  // lane 0's view for all
  } else {
    if (error_raised(p)) return false;
  }
  const unsigned long long base = p.lm_base + (unsigned long long)step * (unsigned long long)L.lm_claims_per_step();
  // One claim ahead: the next unit's atomic is in flight while this unit waits for its slot (a claim is an L2 round
  // trip). Still exactly one overshooting claim: nothing is claimed after a claim that overshot.
  unsigned long long cl = 0;
  if (lane == 0) cl = atomicAdd(p.lm_claim, 1ull);
  for (;;) {
    cl = __shfl_sync(0xffffffffu, cl, 0);
    const long long c = (long long)(cl - base);
    if (c < 0 && lane == 0) atomicCAS(p.error, 0u, 2u);  // cannot happen: the claim ranges of the steps are apart
    const int unit = c >= 0 && c < L.lm_dynamic_units() ? L.n_lm_slices * L.lm_static + int(c) : -1;
    if (unit >= 0 && lane == 0) cl = atomicAdd(p.lm_claim, 1ull);
    if (!unit_page(unit)) return false;
    if (unit < 0) return true;
  }
}

// Loader: waits until the consumers opened the gate of instruction sequence number `seq` (gate_open). False after
// the watchdog, or (STOP) once the consumers stopped.
template <bool STOP>
__device__ __forceinline__ bool loader_gate(const MkParams& p, uint32_t seq) {
  if ((threadIdx.x & 31) == 0)
    for (uint32_t polls = 0; int32_t(gate_get() - seq) < 0; ++polls)
      if (((polls & 1023u) == 1023u && error_raised(p)) || (STOP && loader_stopped())) break;
  __syncwarp();
  if constexpr (STOP) return !__shfl_sync(0xffffffffu, int(error_raised(p) || loader_stopped()), 0);
  return !error_raised(p);
}

// The loader warp: every page of every instruction of this block's queue, n_steps times (STOP: until the consumers
// stop).
template <bool STOP>
__device__ void run_loader(const MkParams& p, unsigned char* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  const uint32_t begin = p.queue_begin[blockIdx.x], end = p.queue_begin[blockIdx.x + 1];
  const uint64_t policy = mk::cuda::l2_evict_first_policy();
  const uint32_t np = uint32_t(p.n_pages);
  RingPos at;
  unsigned long long stall = 0;
  bool ok = true;  // STOP: false after the watchdog or once the consumers stopped (without STOP: always true)
  // The stall before each instruction's pages (T_LOADER_STALL; each step overwrites the last).
  auto stall_of = [&](uint32_t i, unsigned long long stall0) {
    if (p.timing && lane == 0) p.timing[size_t(i) * TIMING_FIELDS + T_LOADER_STALL] = stall - stall0;
  };
  for (int step = 0; step < p.n_steps && ok; ++step)
    for (uint32_t i = begin; i < end && ok; ++i) {
      const unsigned long long stall0 = stall;
      if (p.lm_dynamic && p.instrs[i].op == Op::LmHead) {
        if (!loader_lm_dynamic<STOP>(p, p.instrs[i], step, ring, full, empty, at, stall, policy)) {
          if constexpr (!STOP) return;
          ok = false;
        }
        stall_of(i, stall0);
        continue;
      }
      const WeightRows w = weight_rows(p, p.instrs[i]);
      if (w.n == 0) continue;
      const int rpp = page_rows(w.cols);
      const uint32_t row_bytes = uint32_t(w.cols) * 2u;
      const int gate_n = p.instrs[i].op == Op::MlpGateUp ? p.gate_pages_gu : p.gate_pages;
      const int gate_at = p.gate_pages > 0 && gated_op(p, p.instrs[i].op) ? gate_n * rpp : w.n;
      for (int r = 0; r < w.n; r += rpp, at.next(np)) {
        if (r == gate_at && !loader_gate<STOP>(p, gate_seq(p, step, i))) {
          if constexpr (!STOP) return;
          ok = false;
          break;
        }
        if (!loader_slot<STOP>(p, empty, at, stall)) {
          if constexpr (!STOP) return;
          ok = false;
          break;
        }
        loader_issue(ring, full, at.slot, w.base + int64_t(r) * w.stride, min(rpp, w.n - r), row_bytes, w.stride,
                     w.stride == w.cols, policy, lane);
      }
      stall_of(i, stall0);
    }
  // With stop ids the consumers may leave without reading the last pages (a stopped step's, run ahead): every bulk
  // copy must land before the block exits, so wait for the last np pages issued (the earlier ones were consumed; no
  // copy refills their slots any more, so each full barrier's phase stays where the wait finds it).
  if constexpr (STOP)
    for (uint32_t n = at.page > np ? at.page - np : 0; n < at.page; ++n) mbar_wait_or_error(p, &full[n % np], (n / np) & 1u);
  if (!ok) return;
  if (p.timing && lane == 0) p.timing[size_t(p.n_instr) * TIMING_FIELDS + size_t(blockIdx.x) * BLOCK_FIELDS + B_LOADER_STALL] = stall;
}

// Consumer side: waits until this warp's next ring page (in slot c.slot) has landed (warp 0's wait counted in
// c.page_wait).
__device__ __forceinline__ uint32_t ring_wait_page(const Ctx& c) {
  const uint32_t slot = c.slot;
  if (!mbar_test_wait(&c.full[slot], c.phase)) {
    const int warp = threadIdx.x >> 5;
    const unsigned long long t0 = (c.p.timing && warp == 0) ? global_ns() : 0;
    mbar_wait_or_error(c.p, &c.full[slot], c.phase);
    if (c.p.timing && warp == 0) c.page_wait += global_ns() - t0;
  }
  return slot;
}

// Consumer side: this warp is done with its page (after its release).
__device__ __forceinline__ void next_page(const Ctx& c) {
  if (++c.slot == uint32_t(c.p.n_pages)) c.slot = 0, c.phase ^= 1u;
}

// a0 += row 0's 8 weights (u0, bf16) . s_in[8 ch, 8 ch + 8), a1 += row 1's (u1): s_in is read as two float4 with the halves swapped
// when sw = 4 (lanes with bit 2 set: bank-conflict-free x reads), the weights' words matched to them.
__device__ __forceinline__ void dot8_pair_sw(const uint4& u0, const uint4& u1, const float* s_in, int ch, int sw, float& a0,
                                             float& a1) {
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

// a0 / a1 += 8 weights of rows 0 / 1 . x as 8 bf16 (one 16-byte chunk; a warp reads 512 consecutive bytes: no conflicts).
__device__ __forceinline__ void dot8_pair_bx(const uint4& u0, const uint4& u1, const uint4& x, float& a0, float& a1) {
  using mk::cuda::bf16_hi;
  using mk::cuda::bf16_lo;
  const float x0 = bf16_lo(x.x), x1 = bf16_hi(x.x), x2 = bf16_lo(x.y), x3 = bf16_hi(x.y), x4 = bf16_lo(x.z),
              x5 = bf16_hi(x.z), x6 = bf16_lo(x.w), x7 = bf16_hi(x.w);
  a0 += bf16_lo(u0.x) * x0 + bf16_hi(u0.x) * x1 + bf16_lo(u0.y) * x2 + bf16_hi(u0.y) * x3 + bf16_lo(u0.z) * x4 +
        bf16_hi(u0.z) * x5 + bf16_lo(u0.w) * x6 + bf16_hi(u0.w) * x7;
  a1 += bf16_lo(u1.x) * x0 + bf16_hi(u1.x) * x1 + bf16_lo(u1.y) * x2 + bf16_hi(u1.y) * x3 + bf16_lo(u1.z) * x4 +
        bf16_hi(u1.z) * x5 + bf16_lo(u1.w) * x6 + bf16_hi(u1.w) * x7;
}

// Consumer warps per ring page beyond row pairs: MlpDown's pages of a single row pair (or lone row) are split by
// columns over XB_SPLIT warps (params.cuh), the others give a warp a row pair.
__device__ __forceinline__ bool split_page(bool xb, int nr) { return xb && nr <= 2; }

// Part `t` (< XB_SPLIT) of a split page: this warp's column range of the page's rows, its partial sums put in the
// slot's scratch (params.cuh RED_FLOATS); the warp whose part arrives last adds the XB_SPLIT partials in part order
// (the same bits whoever is last), resets the slot's counter for the slot's next page and calls out(). The reset is
// ordered before that page's parts by the empty / full barriers between them.
template <class Out>
__device__ __forceinline__ void xb_split_part(const Ctx& c, uint32_t slot, const uint4* pg, int chunks, int nr, int row0,
                                              int t, const float* s_in, Out&& out) {
  const int lane = threadIdx.x & 31;
  const int per = (chunks + XB_SPLIT - 1) / XB_SPLIT, c0 = t * per, c1 = min(chunks, c0 + per);
  const uint4* w0 = pg;
  const uint4* xb = reinterpret_cast<const uint4*>(s_in);
  float a0 = 0.f, a1 = 0.f;
  if (nr == 2) {
    const uint4* w1 = w0 + chunks;
    for (int ch = c0 + lane; ch < c1; ch += 32) dot8_pair_bx(w0[ch], w1[ch], xb[ch], a0, a1);
  } else {
    float unused = 0.f;
    for (int ch = c0 + lane; ch < c1; ch += 32) {
      const uint4 u0 = w0[ch];
      dot8_pair_bx(u0, u0, xb[ch], a0, unused);
    }
  }
  a0 = mk::cuda::warp_sum(a0);
  a1 = mk::cuda::warp_sum(a1);
  if (lane != 0) return;
  volatile float* part = split_part(c.s_red, slot);
  int* count = split_count(c.s_red) + slot;
  part[t] = a0, part[XB_SPLIT + t] = a1;
  __threadfence_block();
  if (atomicAdd(count, 1) != XB_SPLIT - 1) return;
  __threadfence_block();
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int k = 0; k < XB_SPLIT; ++k) s0 += part[k], s1 += part[XB_SPLIT + k];
  *count = 0;
  out(row0, s0);
  if (nr == 2) out(row0 + 1, s1);
}

// Consumer side of this warp's next ring page (landed, in `slot`): its nr rows of `cols` bf16 times s_in, out(row0 + j, .)
// for row j by lane 0 of the warp that owns row pair j / 2 (pair q of the page goes to warp (pair_base + q) % WARPS:
// successive pages start where the last one ended); then this warp releases the page. XB: s_in holds x as packed bf16
// pairs (element 2k in the low half of word k: MlpDown's act, ops/mlp.cuh).
// Why a row pair per warp (bench/RESULTS.md session 30 calls 2-6): a warp's item is latency-bound (~0.4 us), so the
// consumers drain the ring at (warps / item latency) x item bytes, and a slot is free only when its page's items are
// done. Four rows per warp (one x read for 4 rows) held each slot ~1.6x longer: +1.7% at 1B; half pairs split by
// columns (more warps per page, partials merged in shared memory) halved the drain rate: +3.8%.
template <bool XB = false, class Out>
__device__ __forceinline__ void ring_page_matvec(const Ctx& c, uint32_t slot, int cols, int nr, int row0, int pair_base,
                                                 const float* s_in, Out&& out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunks = cols / 8, n_pairs = (nr + 1) / 2;  // chunks: 16-byte units per row
  const int first = ((warp - pair_base) % WARPS + WARPS) % WARPS;  // this warp's first pair in the page
  const uint4* pg = reinterpret_cast<const uint4*>(c.ring + size_t(slot) * PAGE_BYTES);
  if (split_page(XB, nr)) {  // one row pair (or lone row) by columns over XB_SPLIT warps
    if (first < XB_SPLIT) xb_split_part(c, slot, pg, chunks, nr, row0, first, s_in, out);
    __syncwarp();
    if (lane == 0) mbar_arrive(&c.empty[slot]);
    next_page(c);
    return;
  }
  for (int q = first; q < n_pairs; q += WARPS) {
    const int j = 2 * q;
    const bool two = j + 1 < nr;
    const uint4* w0 = pg + size_t(j) * chunks;
    float a0 = 0.f, a1 = 0.f;
    if constexpr (XB) {  // MlpDown: x as bf16 pairs; a lone row (8B's: one 28 KB row per page) read once, not twice
      const uint4* xb = reinterpret_cast<const uint4*>(s_in);
      if (two) {
        const uint4* w1 = w0 + chunks;
#pragma unroll 2
        for (int ch = lane; ch < chunks; ch += 32) dot8_pair_bx(w0[ch], w1[ch], xb[ch], a0, a1);
      } else {
        float unused = 0.f;
#pragma unroll 2
        for (int ch = lane; ch < chunks; ch += 32) {
          const uint4 u0 = w0[ch];
          dot8_pair_bx(u0, u0, xb[ch], a0, unused);
        }
      }
    } else {  // the other ops' rows come in pairs on the supported models (a lone row is computed twice)
      const uint2* v0 = reinterpret_cast<const uint2*>(w0);
      const uint2* v1 = two ? v0 + 2 * chunks : v0;
      const float4* x4 = reinterpret_cast<const float4*>(s_in);
      // 8 bytes of each row and 16 of x per lane and step, so consecutive lanes read consecutive x (session 28: no
      // bank conflicts without a swizzle; the 8-weight form spent 8 SELs per step matching words to swapped x halves).
      // Four sums per row, one per weight position of the step, each FFMA depending only on the previous step's: the
      // FMUL -> 3 FFMA -> FADD chain per step before was 10 dependent float ops to these 8 (bench/RESULTS.md session 31
      // call 1: 1B -0.5%, sampled -2.2%). Not in MlpDown's or the narrow pages: there it lost (call 2, +0.6%).
      float b0[4] = {0.f, 0.f, 0.f, 0.f}, b1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int h = lane; h < 2 * chunks; h += 32) {
        const uint2 u0 = v0[h], u1 = v1[h];
        const float4 x = x4[h];
        b0[0] = fmaf(mk::cuda::bf16_lo(u0.x), x.x, b0[0]);
        b0[1] = fmaf(mk::cuda::bf16_hi(u0.x), x.y, b0[1]);
        b0[2] = fmaf(mk::cuda::bf16_lo(u0.y), x.z, b0[2]);
        b0[3] = fmaf(mk::cuda::bf16_hi(u0.y), x.w, b0[3]);
        b1[0] = fmaf(mk::cuda::bf16_lo(u1.x), x.x, b1[0]);
        b1[1] = fmaf(mk::cuda::bf16_hi(u1.x), x.y, b1[1]);
        b1[2] = fmaf(mk::cuda::bf16_lo(u1.y), x.z, b1[2]);
        b1[3] = fmaf(mk::cuda::bf16_hi(u1.y), x.w, b1[3]);
      }
      a0 = (b0[0] + b0[1]) + (b0[2] + b0[3]);
      a1 = (b1[0] + b1[1]) + (b1[2] + b1[3]);
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
  next_page(c);
}

// ring_page_matvec for rows of at most 512 columns (AttnOProj's kv group: group x head_dim): a warp takes 4 row pairs
// at once, a group of 8 lanes each (quad q of the page goes to warp (quad_base + q) % WARPS), 8 lanes summing a row
// over 3 shuffles. Why: one pair per warp spent most of its time in two 5-shuffle reductions of a single 16-byte chunk
// per lane, and with 11 consumer warps AttnOProj's 64 pairs per SM (1B) took 6 rounds. out() is called by lane 0 of
// the owning group (lanes 0, 8, 16, 24): callers must not keep per-warp state in it.
template <class Out>
__device__ __forceinline__ void ring_page_matvec_narrow(const Ctx& c, uint32_t slot, int cols, int nr, int row0,
                                                        int quad_base, const float* s_in, Out&& out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & 7, grp = lane >> 3;
  const int chunks = cols / 8, n_pairs = (nr + 1) / 2, n_quads = (n_pairs + 3) / 4;
  const int sw = (lane & 4) ? 4 : 0;  // bank-conflict-free x reads (dot8_pair_sw; 16-byte weight loads)
  const int first = ((warp - quad_base) % WARPS + WARPS) % WARPS;
  const uint4* pg = reinterpret_cast<const uint4*>(c.ring + size_t(slot) * PAGE_BYTES);
  for (int q = first; q < n_quads; q += WARPS) {
    const int j = 2 * (4 * q + grp);
    const bool one = j < nr, two = j + 1 < nr;
    const uint4* w0 = pg + size_t(one ? j : 0) * chunks;
    const uint4* w1 = two ? w0 + chunks : w0;
    float a0 = 0.f, a1 = 0.f;
    for (int ch = sub; ch < chunks; ch += 8) {
      const uint4 u0 = w0[ch], u1 = w1[ch];
      dot8_pair_sw(u0, u1, s_in, ch, sw, a0, a1);
    }
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) {
      a0 += __shfl_xor_sync(0xffffffffu, a0, o);
      a1 += __shfl_xor_sync(0xffffffffu, a1, o);
    }
    if (sub == 0 && one) {
      out(row0 + j, a0);
      if (two) out(row0 + j + 1, a1);
    }
  }
  __syncwarp();
  if (lane == 0) mbar_arrive(&c.empty[slot]);
  next_page(c);
}

// Consumer side: out(row0 + i, sum_k W[i][k] * s_in[k]) for every row of `w`, read from the ring pages
// in the loader's order (called by all consumer warps; lane 0 of the owning warp calls out). NARROW: rows of at most
// 512 columns take ring_page_matvec_narrow (whose out() runs in lanes 0, 8, 16, 24).
template <bool NARROW = false, bool XB = false, class Out>
__device__ void ring_matvec(const Ctx& c, const WeightRows& w, const float* s_in, Out&& out) {
  const int rpp = page_rows(w.cols);
  int pair_base = 0;
  for (int r = 0; r < w.n; r += rpp) {
    const int nr = min(rpp, w.n - r);
    if (NARROW && w.cols <= 512) {
      ring_page_matvec_narrow(c, ring_wait_page(c), w.cols, nr, w.row0 + r, pair_base, s_in, out);
      pair_base += ((nr + 1) / 2 + 3) / 4;
    } else {
      ring_page_matvec<XB>(c, ring_wait_page(c), w.cols, nr, w.row0 + r, pair_base, s_in, out);
      pair_base += split_page(XB, nr) ? XB_SPLIT : (nr + 1) / 2;
    }
  }
}

}  // namespace mk::megakernel::device
