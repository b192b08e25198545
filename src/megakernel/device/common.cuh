// Device building blocks of the megakernel ops: the counter protocol (wait / signal), activation loads
// that bypass L1, the residual reduction shared by every reader, RMSNorm into shared memory, and the
// row-sliced bf16 matvec: from the weight ring (ring.cuh) or, without a ring, straight from global
// memory with 60 KB per SM in flight (version 2). Everything here runs on the consumer warps only and
// synchronises them with named barrier 1 (csync), never __syncthreads (the loader warp runs apart).
#pragma once
#include <cuda_bf16.h>

#include "cuda/common/device.cuh"
#include "megakernel/device/params.cuh"
#include "megakernel/device/poll.cuh"
#include "megakernel/device/ring.cuh"

namespace mk::megakernel::device {

using mk::cuda::ld_stream;
using mk::cuda::dot8_pair;
using mk::cuda::unpack8;
using mk::cuda::warp_max;
using mk::cuda::warp_sum;

// Sum over the consumer threads; every one gets the result. s_red: >= 32 floats of shared memory.
__device__ __forceinline__ float cons_sum(float v, float* s_red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  csync();  // s_red may still be read by a previous call
  if (lane == 0) s_red[warp] = v;
  csync();
  v = lane < WARPS ? s_red[lane] : 0.f;
  return warp_sum(v);
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Waits for every dependency of `in` (thread 0 polls, the consumer warps follow). Returns false when the
// watchdog fired (here or in another block): the caller leaves the kernel.
__device__ bool wait_deps(const MkParams& p, const Instr& in, uint32_t epoch, uint32_t instr_index) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    int ok = 1;
    for (int w = 0; w < in.n_waits && ok; ++w) {
      const Wait& wt = in.waits[w];
      const uint32_t target = (epoch + 1u - wt.lag) * uint32_t(wt.count);
      const uint32_t* c = p.counters + wt.counter;
      long long t0 = clock64();
      // Wrap-safe: the counter is "done" once it is at most 2^31 past... i.e. (value - target) >= 0.
      for (uint32_t polls = 0; int32_t(ld_acquire(c) - target) < 0; ++polls) {
        if ((polls & 255u) == 255u &&
            (clock64() - t0 > p.watchdog_cycles || *reinterpret_cast<volatile uint32_t*>(p.error) != 0)) {
          if (atomicCAS(p.error, 0u, 1u) == 0u) {
            p.error[1] = blockIdx.x, p.error[2] = instr_index, p.error[3] = wt.counter;
          }
          ok = 0;
          break;
        }
      }
    }
    // No fence after the acquire: in the PTX model the acquire is ordered before the CTA barrier by
    // program order and bar.sync orders it before the other warps' later loads (which read other SMs'
    // data with ld.cg, at L2), so causality order already holds (params.cuh; measured in version 5).
    s_ok = ok;
  }
  csync();
  return s_ok != 0;
}

// Publishes the instruction's writes: every consumer thread's stores precede the barrier; thread 0's
// red.release.gpu (a release operation, fence.acq_rel strength) is cumulative over the writes the barrier
// ordered before it. (The loader warp writes nothing to global memory, so it need not take part.)
__device__ __forceinline__ void signal(const MkParams& p, uint32_t counter) {
  csync();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.counters + counter) : "memory");
}

// The flag protocol's step barrier (params.cuh): after the block's last instruction of a step, the
// barrier orders every consumer thread's accesses before thread 0's release increment; before the
// block's first instruction of the next step, thread 0 polls with ld.acquire and the barrier orders the
// other threads' later accesses after it (the PUBLISH_RELEASE_NOFENCE_WAIT argument). Returns false when
// the watchdog fired. (The instances with stop ids poll with step_check<true> below instead.)
__device__ __forceinline__ void step_release(const MkParams& p) {
  csync();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.step_counter) : "memory");
}
__device__ bool step_acquire(const MkParams& p, uint32_t target, uint32_t instr_index) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    int ok = 1;
    const long long t0 = clock64();
    for (uint32_t polls = 0; int32_t(ld_acquire(p.step_counter) - target) < 0; ++polls)
      if ((polls & 255u) == 255u &&
          (clock64() - t0 > p.watchdog_cycles || *reinterpret_cast<volatile uint32_t*>(p.error) != 0)) {
        if (atomicCAS(p.error, 0u, 1u) == 0u) p.error[1] = blockIdx.x, p.error[2] = instr_index, p.error[3] = p.L.n_counters;
        ok = 0;
        break;
      }
    s_ok = ok;
  }
  csync();
  return s_ok != 0;
}


// The stop check (isa.h StopIds) before the block's first instruction of step >= 1: thread 0 reads the step's input
// token as the flagged pair ftokens[step] (tag = the step's epoch tag), valid on its own once the tag is the step's, so
// it needs no ordering; in the flag instance (BARRIER) in the same poll as the step barrier: each poll issues the token
// load, then the step counter's ld.acquire, so both round trips overlap and the check adds none where the Argmax's
// block is the last to release (else one more poll). In the counter instance the poll comes before the first
// instruction's dependency wait, which for layer 0's QkvProj then finds the Argmax's counter already incremented (its
// red.release follows the token store), and QkvProj takes the token from here instead of loading it: again no extra
// round trip on the critical path. Every block reads the same pair, so all decide alike. Returns 0 (watchdog), 1
// (run the step; s_step_token = its input, read by layer 0's embedding: residual_in) or 2 (stop: a stop id).
// step < 0 (flag instance only): the step barrier alone, no token (step 0). One call site for both and the token
// passed through shared memory rather than the Ctx: with a second call site, or the token held in a register across
// the step, ptxas spilled 40-48 B more per thread in the flag instance.
__shared__ int32_t s_step_token;
template <bool BARRIER>
__device__ __forceinline__ int step_check(const MkParams& p, uint32_t target, int step, uint32_t tag, uint32_t instr_index) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    int ok = 1;
    int32_t tok = -1;
    const long long t0 = clock64();
    for (uint32_t polls = 0;; ++polls) {
      const u64 t = step >= 0 ? ld_flag(p.ftokens + step) : 0;  // before the acquire: that orders only later loads
      const bool passed = !BARRIER || int32_t(ld_acquire(p.step_counter) - target) >= 0;
      if (passed && (step < 0 || fresh(t, tag))) {
        tok = int32_t(uint32_t(t));
        break;
      }
      if ((polls & 255u) == 255u &&
          (clock64() - t0 > p.watchdog_cycles || *reinterpret_cast<volatile uint32_t*>(p.error) != 0)) {
        if (atomicCAS(p.error, 0u, 1u) == 0u)
          p.error[1] = blockIdx.x, p.error[2] = instr_index, p.error[3] = BARRIER ? uint32_t(p.L.n_counters) : FLAG_WATCHDOG_COUNTER;
        ok = 0;
        break;
      }
    }
    s_step_token = tok;
    s_ok = !ok ? 0 : step >= 0 && p.stop.has(tok) ? 2 : 1;
  }
  csync();
  return s_ok;
}

// 16-byte cp.async (LDGSTS) global -> shared and the wait for all of this thread's cp.async: used to
// issue loads before a dependency wait without holding registers across it.
__device__ __forceinline__ void cp_async16_ca(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // until at most the N most recent committed groups of this thread are in flight
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Where the prefetched norm weights go: s_x[n_embd, 2 n_embd) when s_x is that large (it is when
// n_ff >= 2 n_embd, as in every supported family), else nowhere (rmsnorm reads global memory).
__device__ __forceinline__ float* norm_stage(const Ctx& c) {
  const int n = c.p.L.n_embd;
  return c.p.prefetch && c.p.smem_x_floats >= 2 * n && n % 4 == 0 ? c.s_x + n : nullptr;
}

// The RMSNorm weights of a norm-input op's input (QkvProj, MlpGateUp, LmHead): prefetch_norm stages them and
// rmsnorm_smem reads them from that stage, so both must name the same vector.
__device__ __forceinline__ const float* input_norm(const MkParams& p, const Instr& in) {
  return in.op == Op::QkvProj ? p.layers[in.layer].attn_norm : in.op == Op::MlpGateUp ? p.layers[in.layer].mlp_norm
                                                                                      : p.final_norm;
}

// Before the dependency wait: the norm weights w[0, n_embd) -> norm_stage (cp.async; they never depend on
// this step's producers). s_x is free here: the previous instruction's readers passed its signal barrier.
__device__ __forceinline__ void prefetch_norm(const Ctx& c, const float* w) {
  float* st = norm_stage(c);
  if (!st) return;
  for (int i = 4 * threadIdx.x; i < c.p.L.n_embd; i += 4 * NCT) cp_async16_ca(st + i, w + i);
}

// Re-reads the poll slot q (a Pairs4, or ops/mlp.cuh's Words8) at p until every element holds epoch c.epoch (checks
// the watchdog after the first re-read and every 64th). The slot type's overloads of fresh_slot / ld_slot say how.
__device__ __forceinline__ bool fresh_slot(const Pairs4& q, uint32_t e) { return fresh4(q, e); }
__device__ __forceinline__ void ld_slot(Pairs4& q, const u64* p) { q = ld_pairs4(p); }
template <class Slot, class T>
__device__ __forceinline__ void repoll(const Ctx& c, Slot& q, const T* p) {
  if (fresh_slot(q, c.epoch)) return;
  const long long t0 = clock64();
  for (uint32_t n = 0; !fresh_slot(q, c.epoch); ++n) {
    if ((n & 63u) == 1u && flag_poll_expired(c.p, c.instr, t0)) return;
    ld_slot(q, p);
  }
}

// The value of one pair, polled until it holds epoch c.epoch.
__device__ __forceinline__ float poll1(const Ctx& c, const u64* p) { return flag_val(poll_flag(c.p, p, c.epoch, c.instr)); }

// Every consumer thread polls its share of the n pairs at p (16-byte loads, up to 4 in flight); after the
// barrier that ends it, any consumer thread may read the values (ld_flag_val): a later relaxed load of a
// location observed fresh by a thread ordered before it (bar.sync) cannot return the older value.
// COPY (poll_region_to): also dst[0, n) = the values, each as the thread that polled it saw it fresh.
template <bool COPY>
__device__ __forceinline__ void poll_region_impl(const Ctx& c, const u64* p, int n, float* dst) {
  for (int i0 = 2 * threadIdx.x; i0 < n; i0 += 8 * NCT) {
    ulonglong2 q[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = i0 + k * 2 * NCT;
      if (i + 1 < n) q[k] = ld_flag2(p + i);
      else if (i < n) q[k] = make_ulonglong2(ld_flag(p + i), flag_pair(0.f, c.epoch));
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = i0 + k * 2 * NCT;
      if (i >= n) continue;
      const bool ok = fresh(q[k].x, c.epoch) && fresh(q[k].y, c.epoch);
      if constexpr (COPY) {
        float a = flag_val(q[k].x), b = flag_val(q[k].y);
        if (!ok) {
          a = poll1(c, p + i);
          if (i + 1 < n) b = poll1(c, p + i + 1);
        }
        dst[i] = a;
        if (i + 1 < n) dst[i + 1] = b;
      } else if (!ok) {
        poll1(c, p + i);
        if (i + 1 < n) poll1(c, p + i + 1);
      }
    }
  }
  csync();
}
__device__ void poll_region(const Ctx& c, const u64* p, int n) { poll_region_impl<false>(c, p, n, nullptr); }
// The split attention's merge stage (ops/attention.cuh attn_merge_split); a barrier ends it.
__device__ void poll_region_to(const Ctx& c, const u64* p, int n, float* dst) { poll_region_impl<true>(c, p, n, dst); }

// The whole pair again (same size as the writer's store, so the two are morally strong in the PTX model and
// read-read coherence applies), its value half returned.
__device__ __forceinline__ float ld_flag_val(const u64* p) { return flag_val(ld_flag(p)); }

// Stores one activation element: the plain float (counter protocol) or the flagged pair.
template <bool FLAG>
__device__ __forceinline__ void st_act(const Ctx& c, int64_t off, float v) {
  if constexpr (FLAG) st_flag(c.p.fws + off, v, c.epoch);
  else c.p.ws[off] = v;
}
// The accumulator words of resid_mid[layer] at the step of epoch e (isa.h mid_acc_word: two sets, by e's parity).
__device__ __forceinline__ u64* mid_acc_words(const Ctx& c, int layer, uint32_t e) { return c.p.fws + acc_offset(c.p.L, e, layer); }
__device__ __forceinline__ void add4(float4& a, const float4& b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; }

// s_x[0, n_embd) = resid + sum_g o_part[g] (+ down when not null), summed in this fixed order (the
// simulator's), so every reader computes the same bits. 16-byte loads, up to 8 partials in flight per
// thread (the reduction is latency-bound: issue all loads before the first add). (Tried in version 5:
// two float4 slots per thread with all their loads in flight, so that warp 0 does not take a second
// serial round trip when n_embd / 4 > NCT -- ptxas then spilled ~450 B per thread; not kept.)
__device__ void sum_residual(const Ctx& c, const float* resid, const float* o_part, int n_parts, const float* down) {
  const Layout& L = c.p.L;
  for (int i = 4 * threadIdx.x; i < L.n_embd; i += 4 * NCT) {
    float4 x = ld_act4(resid + i);
    for (int g0 = 0; g0 < n_parts; g0 += 8) {
      float4 v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (g0 + k < n_parts) v[k] = ld_act4(o_part + int64_t(g0 + k) * L.n_embd + i);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (g0 + k < n_parts) add4(x, v[k]);
    }
    if (down) add4(x, ld_act4(down + i));
    *reinterpret_cast<float4*>(c.s_x + i) = x;
  }
}

// Flag protocol: s_x[0, n_embd) = v[0] + v[1] + ... in this order (the counter path's and the simulator's):
// v[0] at fws offset `first`, then n_parts vectors at parts + k * n_embd, then `last` when >= 0. Each
// thread polls its 4 elements of 4 vectors at a time (32 registers of pairs in flight, as the counter
// path's 8 float4), re-reading only stale ones.
__device__ void sum_residual_flag(const Ctx& c, int64_t first, int64_t parts, int n_parts, int64_t last) {
  const Layout& L = c.p.L;
  const u64* f = c.p.fws;
  const int n = 1 + n_parts + (last >= 0 ? 1 : 0);
  for (int i = 4 * threadIdx.x; i < L.n_embd; i += 4 * NCT) {
    auto at = [&](int k) { return f + (k == 0 ? first : k <= n_parts ? parts + int64_t(k - 1) * L.n_embd : last) + i; };
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k0 = 0; k0 < n; k0 += 4) {
      Pairs4 r[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k0 + k < n) r[k] = ld_pairs4(at(k0 + k));
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k0 + k < n) {
          repoll(c, r[k], at(k0 + k));
          if (k0 + k == 0) x = val4(r[k]);
          else add4(x, val4(r[k]));
        }
    }
    *reinterpret_cast<float4*>(c.s_x + i) = x;
  }
}

// s_x[0, n_embd) = the residual stream entering layer l (l = n_layer: the final norm's input):
// embedding row for l = 0, else resid[l-1] + sum_g o_part[l-1][g] + down[l-1] (with L.mid_resid:
// resid_mid[l-1] + down[l-1], the same bits).
// STOP: the interpreter instance with stop ids (its step check read the step's input token).
template <bool FLAG, bool STOP = false>
__device__ void residual_in(const Ctx& c, int l) {
  const Layout& L = c.p.L;
  if (l == 0) {
    // With stop ids the step's stop check (step_check) has read the token already (steps >= 1; its barrier orders
    // the shared word before this read, and the next write of it comes only at the next step's check).
    const int32_t token = STOP && c.step > 0 ? s_step_token
                          : FLAG            ? int32_t(__float_as_uint(poll1(c, c.p.ftokens + c.step)))
                                            : __ldcg(c.p.tokens + c.step);
    const bf16* row = c.p.tok_embd + size_t(token) * size_t(L.n_embd);
    for (int i = threadIdx.x; i < L.n_embd; i += NCT) c.s_x[i] = __bfloat162float(row[i]);
    return;
  }
  const int64_t E = L.n_embd, down = L.down + int64_t(l - 1) * E;
  if constexpr (FLAG) {
    if (L.mid_resid) sum_residual_flag(c, L.resid_mid + (l - 1) * E, 0, 0, down);
    else sum_residual_flag(c, L.resid + (l - 1) * E, L.o_part + int64_t(l - 1) * L.n_kv_head * E, L.n_kv_head, down);
    return;
  }
  if (L.mid_resid) {
    sum_residual(c, c.p.ws + L.resid_mid + (l - 1) * E, nullptr, 0, c.p.ws + down);
    return;
  }
  sum_residual(c, c.p.ws + L.resid + int64_t(l - 1) * L.n_embd, c.p.ws + L.o_part + int64_t(l - 1) * L.n_kv_head * L.n_embd,
               L.n_kv_head, c.p.ws + down);
}

// s_x[0, n) = w * (s_x * rsqrt(mean(s_x^2) + eps)) in place (cpu::rmsnorm). Ends with a barrier.
// With `staged` (prefetch_norm issued before the wait) w is read from norm_stage instead.
__device__ void rmsnorm_smem(const Ctx& c, const float* w, int n, bool staged = false) {
  if (staged) {
    if (const float* st = norm_stage(c)) w = st;
    cp_async_wait_all();  // this thread's copies; the barrier below publishes them to the others
  }
  csync();
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += NCT) ss += c.s_x[i] * c.s_x[i];
  ss = cons_sum(ss, c.s_red);
  const float inv = 1.f / sqrtf(ss / float(n) + c.p.eps);
  for (int i = threadIdx.x; i < n; i += NCT) c.s_x[i] = w[i] * (c.s_x[i] * inv);
  csync();
}

// Timestamp `field` of the current instruction (MkParams::timing; thread 0).
__device__ __forceinline__ void stamp(const Ctx& c, int field) {
  if (c.p.timing && threadIdx.x == 0) c.p.timing[size_t(c.instr) * TIMING_FIELDS + size_t(field)] = global_ns();
}

// For rows r in [r0, r1): out(r, sum_{k < cols} W[r * ld + k] * s_in[k]), called by lane 0 of the warp
// that owns the row. Each warp takes two rows at a time and issues U 16-byte loads per row before
// using any (2 x 4 x 16 B x NCT threads: 44 KB in flight per SM). Needs cols % 8 == 0, ld % 8 == 0. XB: s_in
// holds x as bf16 pairs (ring.cuh ring_page_matvec).
template <bool XB = false, class Out>
__device__ __forceinline__ void matvec_rows(const bf16* W, int64_t ld, const float* s_in, int cols, int r0, int r1,
                                            Out&& out) {
  constexpr int U = 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = WARPS;
  for (int r = r0 + 2 * warp; r < r1; r += 2 * n_warp) {
    const bool two = r + 1 < r1;
    const bf16* w0 = W + int64_t(r) * ld;
    const bf16* w1 = two ? w0 + ld : w0;
    float a0 = 0.f, a1 = 0.f;
    for (int k0 = lane * 8; k0 < cols; k0 += 256 * U) {
      uint4 u0[U], u1[U];
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const int k = k0 + j * 256;
        if (k < cols) u0[j] = ld_stream(w0 + k), u1[j] = ld_stream(w1 + k);
      }
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const int k = k0 + j * 256;
        if (k < cols) {
          if constexpr (XB) dot8_pair_bx(u0[j], u1[j], reinterpret_cast<const uint4*>(s_in)[k / 8], a0, a1);
          else dot8_pair(s_in + k, u0[j], u1[j], a0, a1);
        }
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      out(r, a0);
      if (two) out(r + 1, a1);
    }
  }
}

// The instruction's matvec over its weight rows (ring.cuh weight_rows): from the ring in the kernel
// that runs one (the loader streams exactly these rows), else straight from global memory. A template
// parameter, not a run-time branch: the two kernels get their own register allocation (with both paths
// in one kernel ptxas spilled 300 B per thread).
template <bool RING, bool NARROW = false, bool XB = false, class Out>
__device__ __forceinline__ void matvec(const Ctx& c, const Instr& in, const float* s_in, Out&& out) {
  const WeightRows w = weight_rows(c.p, in);
  if (c.p.timing && threadIdx.x == 0 && c.matvec_start == 0) c.matvec_start = global_ns();
  if constexpr (RING) {
    ring_matvec<NARROW, XB>(c, w, s_in, out);
  } else {
    matvec_rows<XB>(w.base - int64_t(w.row0) * w.stride, w.stride, s_in, w.cols, w.row0, w.row0 + w.n, out);
  }
}

// First index of the largest value, NaN the largest (cpu::argmax): is (v, i) better than (bv, bi)?
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
  if (isnan(bv)) return isnan(v) && i < bi;
  if (isnan(v)) return true;
  return v > bv || (v == bv && i < bi);
}

}  // namespace mk::megakernel::device
