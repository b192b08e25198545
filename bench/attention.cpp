// Attention benchmark (bf16, 32 query / 8 kv heads, as ../shared/peers/attn_bench.py measures the SDPA peers).
// Prefill: TFLOP/s (4*B*Hq*S*S*D, halved when causal) for seq 1k/4k/16k, batch 1-4, head dim 64/128, causal
// and not; an ablation of the FA-4 switches (polynomial exp2 fraction, lazy rescaling) and of the kernels.
// Decode: context 4k/32k/128k, batch 1/8/64, head dim 64/128: us, TB/s of K+V bytes and % of the read ceiling
// measured in the same process; CUDA-graph replays rotating over > L2 of buffers (peers: attention_decode_peers.py).
// Prints 'RESULT {json}' lines (bench/attention_peers.py joins them with the peers) and a table.
// Usage: attention [prefill] [ablation] [decode] [quick] [settle] [decfocus] [decclust] [decv6] [dectma] [dectrace] [clock] [ncu] [knobs]
//                  [pfocus] [ptrace]
#if !defined(MK_HAVE_CUDA)
#include <cstdio>
int main() {
  std::puts("attention benchmark: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../tests/gpu/test_attention_fixture.h"
#include "cuda/common/bench_timing.h"
#include "cuda/common/read_ceiling.h"
#include "cuda/attention/attn_internal.h"
#include "cuda/attention/testing.h"

using namespace mk;
using namespace mk::attn_test;

namespace {

constexpr int HQ = 32, HKV = 8;
bool g_no_hopper = false;  // 'nohopper': table with the FA2-style kernel only (fallback when the Hopper one fails)

// Median ms of fn over reps event-timed runs after one warm-up (cuda/common/bench_timing.h).
float median_ms(cudaStream_t s, int reps, const auto& fn) { return float(cuda::median_event_ms(s, fn, reps, 1)); }

const char* kernel_name(cuda::PrefillKernel k) {
  return k == cuda::PrefillKernel::SIMPLE ? "simple" : k == cuda::PrefillKernel::HOPPER ? "hopper" : "auto";
}

// Contiguous-equivalent paged cache filled on the device: each sequence owns consecutive blocks (the SDPA
// peers read dense K/V).
struct BenchCache {
  DevBuf<uint16_t> k, v;
  DevBuf<int32_t> table;
  int n_blocks = 0, max_blocks = 0, block_size = 0, d = 0;
  BenchCache(int batch, int len, int bs, int head_dim, uint64_t seed) : block_size(bs), d(head_dim) {
    max_blocks = (len + bs - 1) / bs;
    n_blocks = batch * max_blocks;
    const size_t n = size_t(n_blocks) * bs * HKV * d;
    k.resize(n);
    v.resize(n);
    MK_CHECK(cuda::fill_random_bf16(nullptr, reinterpret_cast<cuda::bf16*>(k.ptr), n, seed, 1.f).ok());
    MK_CHECK(cuda::fill_random_bf16(nullptr, reinterpret_cast<cuda::bf16*>(v.ptr), n, seed + 1, 1.f).ok());
    std::vector<int32_t> t(n_blocks);
    std::iota(t.begin(), t.end(), 0);
    table.upload(t);
  }
  cuda::KvCacheView view() const {
    cuda::KvCacheView kv;
    kv.k = reinterpret_cast<cuda::bf16*>(k.ptr);
    kv.v = reinterpret_cast<cuda::bf16*>(v.ptr);
    kv.kv_n_blocks = n_blocks;
    kv.kv_block_size = block_size;
    kv.n_kv_head = HKV;
    kv.head_dim = d;
    return kv;
  }
  cuda::BlockTableView table_view() const { return {table.ptr, max_blocks}; }
};

struct PrefillSetup {
  BenchCache cache;
  DevBuf<uint16_t> q, out;
  DevBuf<int32_t> cu, lens;
  cuda::AttentionPrefillArgs args;
  PrefillSetup(int batch, int seq, int d) : cache(batch, seq, 128, d, batch * 1000 + seq + d) {
    const size_t nq = size_t(batch) * seq * HQ * d;
    q.resize(nq);
    out.resize(nq);
    MK_CHECK(cuda::fill_random_bf16(nullptr, reinterpret_cast<cuda::bf16*>(q.ptr), nq, seq + 7, 1.f).ok());
    std::vector<int32_t> c(batch + 1);
    for (int b = 0; b <= batch; ++b) c[b] = b * seq;
    cu.upload(c);
    lens.upload(std::vector<int32_t>(batch, seq));
    args.q = reinterpret_cast<const cuda::bf16*>(q.ptr);
    args.out = reinterpret_cast<cuda::bf16*>(out.ptr);
    args.cu_seqlens_q = cu.ptr;
    args.seq_lens_k = lens.ptr;
    args.kv = cache.view();
    args.block_table = cache.table_view();
    args.batch = batch;
    args.total_q = batch * seq;
    args.max_seqlen_q = args.max_seqlen_k = seq;
    args.n_head = HQ;
  }
};

void prefill_point(PrefillSetup& st, int batch, int seq, int d, bool causal, const cuda::AttentionOptions& opt,
                   const char* tag) {
  st.args.causal = causal;
  const double flops = 4.0 * batch * HQ * double(seq) * seq * d / (causal ? 2 : 1);
  const int reps = flops > 2e14 ? 10 : 30;
  Status status;
  const float ms = median_ms(nullptr, reps, [&] { status = cuda::attention_prefill(nullptr, st.args, opt); });
  if (!status.ok()) {
    std::printf("[prefill] %s FAILED: %s\n", tag, status.message().c_str());
    return;
  }
  ATT_CUDA_CHECK(cudaGetLastError());
  const double tf = flops / (ms * 1e-3) / 1e12;
  std::printf("[prefill] %-20s %-6s D=%3d S=%5d B=%d causal=%d poly=%.3f lazy=%d  %8.3f ms  %6.1f TFLOP/s\n", tag,
              kernel_name(opt.prefill_kernel), d, seq, batch, int(causal), opt.poly_exp2_fraction,
              int(opt.lazy_rescale), ms, tf);
  std::printf("RESULT {\"kind\":\"prefill\",\"tag\":\"%s\",\"kernel\":\"%s\",\"head_dim\":%d,\"seq\":%d,\"batch\":%d,"
              "\"causal\":%s,\"poly\":%.3f,\"lazy\":%d,\"median_ms\":%.5f,\"tflops\":%.2f}\n",
              tag, kernel_name(opt.prefill_kernel), d, seq, batch, causal ? "true" : "false", opt.poly_exp2_fraction,
              int(opt.lazy_rescale), ms, tf);
  std::fflush(stdout);
}

void prefill_table(bool quick) {
  for (int d : {64, 128})
    for (int seq : {1024, 4096, 16384})
      for (int batch : {1, 2, 3, 4}) {
        if (quick && batch != 1 && batch != 4) continue;  // quick: the ends of the batch range
        PrefillSetup st(batch, seq, d);
        cuda::AttentionOptions o;
        if (g_no_hopper) o.prefill_kernel = cuda::PrefillKernel::SIMPLE;
        for (bool causal : {false, true}) prefill_point(st, batch, seq, d, causal, o, "table");
      }
}

// 'settle': only the defaults at 16k, batch 2 (head dims 64 / 128, non-causal / causal), so that two builds can
// be timed back to back, alternating, in one device call (bench/attention_settle.sh).
void settle() {
  for (int d : {64, 128}) {
    PrefillSetup st(2, 16384, d);
    for (bool causal : {false, true}) prefill_point(st, 2, 16384, d, causal, cuda::AttentionOptions{}, "settle");
  }
}

// 'pfocus': the defaults on the shapes where cuDNN leads or is close (head dim 128 at 4k batch 4 and 1k batch 4) and
// the 16k batch 2 targets, non-causal and causal, so that builds can be compared in ABBA order with the cuDNN
// peers on the same rows (bench/attention_settle.sh with SETTLE_MODE=pfocus).
void prefill_focus() {
  const struct {
    int d, seq, batch;
  } shapes[] = {{128, 4096, 4}, {128, 1024, 4}, {64, 4096, 4}, {128, 16384, 2}, {64, 16384, 2}};
  for (const auto& sh : shapes) {
    PrefillSetup st(sh.batch, sh.seq, sh.d);
    for (bool causal : {false, true})
      prefill_point(st, sh.batch, sh.seq, sh.d, causal, cuda::AttentionOptions{}, "pfocus");
  }
}

// 'ptrace' (only with prefill_hopper_d*.cu built with MK_PREFILL_TRACE=1): per-CTA globaltimer stamps of one
// default launch (after 3 untraced ones) per shape: where an SM's time goes (CTA prologue up to the first S, the
// K/V loop, the epilogue, the gaps between consecutive CTAs on an SM, the SMs idle before their first and after
// their last CTA), as % of SMs x the launch's span, and per-CTA means.
void prefill_trace() {
  const struct {
    int d, seq, batch;
    bool causal;
  } shapes[] = {{128, 4096, 4, false}, {128, 4096, 4, true}, {128, 4096, 1, true}, {128, 16384, 2, false},
                {128, 16384, 2, true}, {64, 4096, 4, true}, {64, 16384, 2, false}, {64, 16384, 2, true}};
  for (const auto& sh : shapes) {
    PrefillSetup st(sh.batch, sh.seq, sh.d);
    st.args.causal = sh.causal;
    const cuda::AttentionOptions o;
    for (int i = 0; i < 3; ++i) MK_CHECK(cuda::attention_prefill(nullptr, st.args, o).ok());
    const size_t cap = size_t(sh.seq / 64 + 1) * HQ * sh.batch;
    DevBuf<unsigned long long> buf(cap * 8);
    ATT_CUDA_CHECK(cudaMemset(buf.ptr, 0, buf.n * 8));
    auto arm = sh.d == 64 ? cuda::attn::prefill_trace_arm_d64 : cuda::attn::prefill_trace_arm_d128;
    if (arm(buf.ptr, buf.n * 8) != cudaSuccess) {
      std::printf("[ptrace] not a trace build (MK_PREFILL_TRACE=0)\n");
      return;
    }
    MK_CHECK(cuda::attention_prefill(nullptr, st.args, o).ok());
    ATT_CUDA_CHECK(cudaDeviceSynchronize());
    ATT_CUDA_CHECK(arm(nullptr, 0));
    const std::vector<unsigned long long> r = buf.download();
    struct Cta {
      double t[7];
      unsigned sm;
      int nt;
    };
    std::vector<Cta> ctas;
    for (size_t i = 0; i < cap; ++i) {
      const unsigned long long* w = &r[i * 8];
      if (w[0] == 0) continue;  // past the grid
      Cta c{};
      for (int k = 0; k < 7; ++k) c.t[k] = double(w[k]);
      c.sm = unsigned(w[7] >> 32) & 0xfff;
      c.nt = int(w[7] >> 44);
      if (c.nt == 0xfffff || c.nt == 0) continue;
      ctas.push_back(c);
    }
    if (ctas.empty()) continue;
    double t0 = 1e30, t1 = 0;
    auto end_of = [](const Cta& c) { return std::max(c.t[4], c.t[5]); };
    for (const Cta& c : ctas) {
      t0 = std::min(t0, c.t[0]);
      t1 = std::max(t1, end_of(c));
    }
    std::vector<std::vector<const Cta*>> per_sm(1024);
    int n_sm = 0;
    for (const Cta& c : ctas) {
      if (per_sm[c.sm].empty()) ++n_sm;
      per_sm[c.sm].push_back(&c);
    }
    double gaps = 0, head = 0, tail = 0, busy = 0, pre = 0, loop = 0, post = 0, to_q = 0, wg_lag = 0, end_lag = 0;
    double tiles = 0, loop_tiles = 0, last_start = 0;
    int n_gaps = 0;
    for (auto& v : per_sm) {
      if (v.empty()) continue;
      std::sort(v.begin(), v.end(), [](const Cta* a, const Cta* b) { return a->t[0] < b->t[0]; });
      head += v.front()->t[0] - t0;
      tail += t1 - end_of(*v.back());
      last_start = std::max(last_start, v.back()->t[0]);
      for (size_t i = 1; i < v.size(); ++i, ++n_gaps) gaps += v[i]->t[0] - end_of(*v[i - 1]);
    }
    for (const Cta& c : ctas) {
      busy += end_of(c) - c.t[0];
      pre += c.t[2] - c.t[0];
      loop += c.t[3] - c.t[2];
      post += end_of(c) - c.t[3];
      to_q += c.t[1] - c.t[0];
      wg_lag += c.t[6] - c.t[2];
      end_lag += c.t[5] - c.t[4];
      tiles += c.nt;
      loop_tiles += c.nt - 1;
    }
    const double span = t1 - t0, total = span * n_sm, n = double(ctas.size());
    const double flops = 4.0 * sh.batch * HQ * double(sh.seq) * sh.seq * sh.d / (sh.causal ? 2 : 1);
    std::printf("[ptrace] D=%d S=%d B=%d causal=%d: %zu CTAs on %d SMs, span %.1f us (%.1f TFLOP/s), %.2f tiles/CTA\n"
                "  SM time: prologue %.1f%% | K/V loop %.1f%% | epilogue %.1f%% | gaps %.1f%% | head %.1f%% | tail %.1f%%"
                " (last CTA start at %.1f us)\n"
                "  per CTA (us): entry->Q %.2f, entry->first S %.2f (last WG +%.2f), loop %.1f ns per tile, last P V"
                " + store %.2f (last WG ends +%.2f), gap to the next CTA %.2f\n",
                sh.d, sh.seq, sh.batch, int(sh.causal), ctas.size(), n_sm, span * 1e-3, flops / (span * 1e-9) / 1e12,
                tiles / n, 100 * pre / total, 100 * loop / total, 100 * post / total, 100 * gaps / total,
                100 * head / total, 100 * tail / total, (last_start - t0) * 1e-3, to_q / n * 1e-3, pre / n * 1e-3,
                wg_lag / n * 1e-3, loop_tiles > 0 ? loop / loop_tiles : 0.0, post / n * 1e-3, end_lag / n * 1e-3,
                n_gaps ? gaps / n_gaps * 1e-3 : 0.0);
    std::fflush(stdout);
  }
}

// 'knobs': the Hopper prefill's run-time switches on the table's shapes where cuDNN led (batch 4 at 1k-4k keys; 16k
// batch 2 for reference), each against the defaults in mirrored order (defaults, switches..., switches reversed,
// defaults), to see whether a per-shape choice would win there.
void knobs() {
  struct Knob {
    const char* tag;
    void (*set)(cuda::AttentionOptions&);
  };
  const Knob all[] = {{"knob default", [](cuda::AttentionOptions&) {}},
                      {"knob nwg2", [](cuda::AttentionOptions& o) { o.hopper_consumer_warpgroups = 2; }},
                      {"knob no-lpt", [](cuda::AttentionOptions& o) { o.hopper_lpt_schedule = false; }},
                      {"knob no-pingpong", [](cuda::AttentionOptions& o) { o.hopper_pingpong = false; }},
                      {"knob no-overlap", [](cuda::AttentionOptions& o) { o.hopper_overlap = false; }}};
  const struct {
    int d, seq, batch;
  } shapes[] = {{64, 4096, 4}, {128, 1024, 4}, {128, 4096, 4}, {64, 16384, 2}, {128, 16384, 2}};
  for (const auto& sh : shapes) {
    PrefillSetup st(sh.batch, sh.seq, sh.d);
    for (bool causal : {false, true}) {
      std::vector<const Knob*> order;
      for (const Knob& k : all)
        if (sh.d == 64 || std::string(k.tag) != "knob nwg2") order.push_back(&k);  // 2 consumer WGs only at 128
      for (int i = int(order.size()) - 1; i >= 0; --i) order.push_back(order[size_t(i)]);
      for (const Knob* k : order) {
        cuda::AttentionOptions o;
        o.prefill_kernel = cuda::PrefillKernel::HOPPER;
        k->set(o);
        prefill_point(st, sh.batch, sh.seq, sh.d, causal, o, k->tag);
      }
    }
  }
}

// 'clock': the default kernel at 16k, batch 2, non-causal, head dim 64 then 128, launched back to back for ~1.5 s
// each, with the wall time at the start of each phase, so that an nvidia-smi log of SM clock and power taken
// alongside (bench/attention_run.sh, ATTN_CLOCK=1) tells how far the sustained rate is power-bound.
void clock_probe() {
  for (int d : {64, 128}) {
    PrefillSetup st(2, 16384, d);
    st.args.causal = false;
    const double flops = 4.0 * 2 * HQ * 16384.0 * 16384.0 * d;
    const cuda::AttentionOptions o;
    MK_CHECK(cuda::attention_prefill(nullptr, st.args, o).ok());  // warm-up
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cudaEvent_t a, b;
    ATT_CUDA_CHECK(cudaEventCreate(&a));
    ATT_CUDA_CHECK(cudaEventCreate(&b));
    ATT_CUDA_CHECK(cudaEventRecord(a));
    const int n = int(1.5 / (flops / 550e12));
    for (int i = 0; i < n; ++i) MK_CHECK(cuda::attention_prefill(nullptr, st.args, o).ok());
    ATT_CUDA_CHECK(cudaEventRecord(b));
    ATT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    ATT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    std::printf("[clock] start %ld.%03ld D=%d %d launches %.1f ms %.1f TFLOP/s\n", long(ts.tv_sec),
                ts.tv_nsec / 1000000, d, n, ms, flops * n / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
}

// 'ncu': one launch of the default kernel at 16k, batch 2, non-causal, head dim 64 then 128, for a profiler.
void ncu_target() {
  for (int d : {64, 128}) {
    PrefillSetup st(2, 16384, d);
    st.args.causal = false;
    MK_CHECK(cuda::attention_prefill(nullptr, st.args, cuda::AttentionOptions{}).ok());
    ATT_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

void ablation() {
  struct Variant {
    cuda::PrefillKernel kernel;
    float poly;
    bool lazy, overlap, pingpong;
    int wgs;          // consumer warpgroups, 0 = default
    const char* tag;  // what differs from the default
    bool lpt = true;  // CTA order longest first
  };
  using K = cuda::PrefillKernel;
  const Variant variants[] = {{K::SIMPLE, 0.f, false, true, true, 0, "fa2"},
                              {K::HOPPER, 0.f, true, true, true, 0, "default"},
                              {K::HOPPER, 0.f, false, true, true, 0, "lazy_off"},
                              {K::HOPPER, 0.125f, true, true, true, 0, "poly"},
                              {K::HOPPER, 0.25f, true, true, true, 0, "poly"},
                              {K::HOPPER, 0.25f, false, true, true, 0, "poly_lazy_off"},
                              {K::HOPPER, 0.375f, true, true, true, 0, "poly"},
                              {K::HOPPER, 0.5f, true, true, true, 0, "poly"},
                              {K::HOPPER, 0.f, true, true, false, 0, "pingpong_off"},
                              {K::HOPPER, 0.f, true, false, true, 0, "overlap_off"},
                              {K::HOPPER, 0.f, true, true, true, 2, "wg2"},
                              {K::HOPPER, 0.25f, true, true, true, 2, "wg2"},
                              {K::HOPPER, 0.f, true, true, false, 2, "wg2_pingpong_off"},
                              {K::HOPPER, 0.f, true, true, true, 0, "lpt_off", false}};
  for (int d : {64, 128}) {
    PrefillSetup st(2, 16384, d);
    for (bool causal : {false, true})
      for (const Variant& v : variants) {
        if (g_no_hopper && v.kernel == K::HOPPER) continue;
        if (d == 128 && v.wgs == 2) continue;  // 2 is the default at 128
        cuda::AttentionOptions o;
        o.prefill_kernel = v.kernel;
        o.poly_exp2_fraction = v.poly;
        o.lazy_rescale = v.lazy;
        o.hopper_overlap = v.overlap;
        o.hopper_pingpong = v.pingpong;
        o.hopper_consumer_warpgroups = v.wgs;
        o.hopper_lpt_schedule = v.lpt;
        const std::string tag = std::string("abl_") + v.tag;
        prefill_point(st, 2, 16384, d, causal, o, tag.c_str());
      }
  }
}

// Decode (one query token per sequence, 32/8 heads): us per call and TB/s of K+V bytes (the bytes that must
// move), as % of the read ceiling measured in this process. CUDA-graph replays of `calls` back-to-back calls,
// rotating over > 512 MB of caches (cold) or one cache (hot). variant: "default", "nopdl" (launch without
// programmatic dependent launch), "w8" (8 warps per CTA, half-size tiles), "splitsN" (forced split count).
struct DecodeSetup {
  int d, len, batch, nbuf;
  size_t kv_bytes;
  std::vector<std::unique_ptr<BenchCache>> caches;
  DevBuf<uint16_t> q, out;
  DevBuf<int32_t> lens;
  DevBuf<float> ws;
  DecodeSetup(int d_, int len_, int batch_) : d(d_), len(len_), batch(batch_) {
    kv_bytes = size_t(2) * HKV * len * d * 2 * batch;
    nbuf = int(std::clamp<size_t>((512000000 + kv_bytes - 1) / kv_bytes, 1, 64));
    for (int i = 0; i < nbuf; ++i) caches.push_back(std::make_unique<BenchCache>(batch, len, 64, d, 100 + i));
    std::mt19937 rng(len + d);
    std::vector<uint16_t> qb;
    std::vector<float> qf;
    random_bf16(rng, size_t(batch) * HQ * d, 1.f, qb, qf);
    q.upload(qb);
    out.resize(qb.size());
    lens.upload(std::vector<int32_t>(batch, len));
    cuda::AttentionOptions big;
    big.decode_splits = 256;  // the largest split count timed below
    ws.resize(std::max(cuda::attention_decode_workspace_bytes(batch, HQ, HKV, d, len),
                       cuda::attention_decode_workspace_bytes(batch, HQ, HKV, d, len, big)) / 4 + 4);
  }
  cuda::AttentionDecodeArgs args(int i) const {
    cuda::AttentionDecodeArgs a;
    a.q = reinterpret_cast<const cuda::bf16*>(q.ptr);
    a.out = reinterpret_cast<cuda::bf16*>(out.ptr);
    a.seq_lens_k = lens.ptr;
    a.kv = caches[i]->view();
    a.block_table = caches[i]->table_view();
    a.batch = batch;
    a.n_head = HQ;
    a.max_seqlen_k = len;
    a.workspace = ws.ptr;
    a.workspace_bytes = ws.n * 4;
    return a;
  }
};

void decode_time(DecodeSetup& st, bool cold, const cuda::AttentionOptions& opt, const char* variant, double ceiling) {
  const int nb = cold ? st.nbuf : 1;
  const double est_us = double(st.kv_bytes) / 4e6 + 5.0;  // at ~4 TB/s
  const int calls = std::clamp(int(3000.0 / est_us), 1, 64);
  const int reps = est_us * calls > 1500 ? 7 : 15;
  cudaStream_t s;
  ATT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<cuda::AttentionDecodeArgs> args;
  for (int i = 0; i < nb; ++i) args.push_back(st.args(i));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ATT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) MK_CHECK(cuda::attention_decode(s, args[i % nb], opt).ok());
  ATT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  ATT_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  const float ms = median_ms(s, reps, [&] { ATT_CUDA_CHECK(cudaGraphLaunch(ge, s)); }) / calls;
  ATT_CUDA_CHECK(cudaGetLastError());
  const double tbps = st.kv_bytes / (ms * 1e-3) / 1e12;
  const int splits = cuda::attention_decode_splits(st.batch, HKV, st.len, opt);
  std::printf("[decode] D=%3d L=%6d B=%2d %-4s %-8s splits=%3d calls=%2d  %9.2f us  %5.2f TB/s  %5.1f%% of read\n",
              st.d, st.len, st.batch, cold ? "cold" : "hot", variant, splits, calls, ms * 1e3, tbps,
              100.0 * tbps / ceiling);
  std::printf("RESULT {\"kind\":\"decode\",\"head_dim\":%d,\"kv_len\":%d,\"batch\":%d,\"temp\":\"%s\",\"variant\":\"%s\","
              "\"splits\":%d,\"us\":%.3f,\"tbps\":%.3f,\"pct_read\":%.1f,\"read_tbps\":%.3f}\n",
              st.d, st.len, st.batch, cold ? "cold" : "hot", variant, splits, ms * 1e3, tbps, 100.0 * tbps / ceiling,
              ceiling);
  std::fflush(stdout);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// The read ceiling of this process for the decode tables, printed for people and as a RESULT line.
double decode_read_ceiling() {
  const auto rc = cuda::measure_read_ceiling(4.0, 15);
  MK_CHECK(rc.ok());
  std::printf("[decode] read ceiling %.3f TB/s (4 GiB read-only kernel, %s, median)\n", rc->tbps, rc->best_shape.c_str());
  std::printf("RESULT {\"kind\":\"read_ceiling\",\"tbps\":%.3f}\n", rc->tbps);
  return rc->tbps;
}

// The shapes of the decode variant tables: head dims 64 and 128; batch 1 at 4k and 32k, batch 8 at 32k, 64 at 4k.
void for_each_variant_shape(const std::function<void(DecodeSetup&, int)>& fn) {
  for (int d : {64, 128})
    for (int len : {4096, 32768})
      for (int batch : {1, 8, 64}) {
        if ((batch == 8 && len != 32768) || (batch == 64 && len != 4096)) continue;
        DecodeSetup st(d, len, batch);
        fn(st, batch);
      }
}

void decode_table(bool quick) {
  const double ceiling = decode_read_ceiling();
  for (int d : {64, 128})
    for (int len : {4096, 32768, 131072})
      for (int batch : {1, 8, 64}) {
        if (quick && batch == 64 && len == 131072) continue;  // 17-34 GB of cache, 4-8 ms per call
        DecodeSetup st(d, len, batch);
        const cuda::AttentionOptions def;
        decode_time(st, true, def, "default", ceiling);
        if (quick) continue;  // quick: the default cold row of each shape only
        if (batch == 1) {
          decode_time(st, false, def, "default", ceiling);
          cuda::AttentionOptions nopdl;
          nopdl.decode_pdl = false;
          decode_time(st, true, nopdl, "nopdl", ceiling);
        }
        if (batch == 1) {
          cuda::AttentionOptions w8;
          w8.decode_warps = 8;
          decode_time(st, true, w8, "w8", ceiling);
        }
        if (batch == 1 && len <= 32768) {  // is the chosen split count the best one?
          for (int n : {4, 8, 32, 64}) {
            cuda::AttentionOptions o;
            o.decode_splits = n;
            decode_time(st, true, o, ("splits" + std::to_string(n)).c_str(), ceiling);
          }
        }
      }
}

// Decode launch options of the variant tables below (the rest as AttentionOptions' defaults).
cuda::AttentionOptions decode_opts(int ctas_per_sm, bool early_kv, int splits, int l2_prefetch_tiles = 2,
                                   bool cluster = false) {
  cuda::AttentionOptions o;
  o.decode_ctas_per_sm = ctas_per_sm;
  o.decode_early_kv = early_kv;
  o.decode_splits = splits;
  o.decode_l2_prefetch_tiles = l2_prefetch_tiles;
  o.decode_cluster_combine = cluster;
  return o;
}

// 'decfocus': batch 1 (and 8) at 4k / 32k, the decode launch variants against the default in one process:
// 2 CTAs per SM (96 KB ring), the early K/V contract, both, and split counts around the chosen one; the
// default is timed again at the end of each shape (drift check).
void decode_focus() {
  const double ceiling = decode_read_ceiling();
  for_each_variant_shape([&](DecodeSetup& st, int batch) {
    decode_time(st, true, decode_opts(0, false, 0), "default", ceiling);  // L2 prefetch of 2 tiles per warp
    decode_time(st, true, decode_opts(0, false, 0, 0), "nopref", ceiling);  // round 4's default
    decode_time(st, true, decode_opts(0, true, 0), "early", ceiling);
    if (batch == 1) {
      decode_time(st, true, decode_opts(0, false, 0, 1), "pref1", ceiling);
      decode_time(st, true, decode_opts(0, false, 0, 4), "pref4", ceiling);
      decode_time(st, true, decode_opts(2, false, 0), "cps2", ceiling);
      decode_time(st, true, decode_opts(2, true, 0), "cps2_early", ceiling);
      decode_time(st, true, decode_opts(2, false, 16), "cps2_s16", ceiling);
      decode_time(st, true, decode_opts(2, true, 16), "cps2_early_s16", ceiling);
      decode_time(st, true, decode_opts(0, false, 12), "s12", ceiling);
      decode_time(st, false, decode_opts(0, false, 0), "default", ceiling);  // hot
    }
    decode_time(st, true, decode_opts(0, false, 0), "default_again", ceiling);
  });
}

// 'decclust': the cluster split combine (AttentionOptions::decode_cluster_combine) against the default and the
// early-K/V / 2-CTAs-per-SM variants, batch 1 at 4k / 32k, batch 8 x 32k and 64 x 4k; the default again last.
void decode_cluster() {
  const double ceiling = decode_read_ceiling();
  for (int d : {64, 128})
    for (int cps : {1, 2})
      for (int n : {2, 8, 16})
        std::printf("[decode] D=%d ctas_per_sm=%d: clusters of %2d CTAs held at once: %d (GQA 4) / %d (GQA 12)\n", d,
                    cps, n, cuda::attn::decode_cluster_capacity(d, n, cps, false),
                    cuda::attn::decode_cluster_capacity(d, n, cps, true));
  const auto opts = [](bool cl, int cps, bool early, int splits = 0) { return decode_opts(cps, early, splits, 2, cl); };
  for_each_variant_shape([&](DecodeSetup& st, int batch) {
    decode_time(st, true, opts(false, 0, false), "default", ceiling);
    decode_time(st, true, opts(true, 0, false), "cluster", ceiling);
    decode_time(st, true, opts(false, 0, true), "early", ceiling);
    decode_time(st, true, opts(true, 0, true), "cl_early", ceiling);
    if (batch == 1) {
      decode_time(st, true, opts(false, 2, true, 16), "cps2_early_s16", ceiling);
      decode_time(st, true, opts(true, 2, true, 16), "cl_cps2_early_s16", ceiling);
      decode_time(st, true, opts(true, 2, false, 16), "cl_cps2_s16", ceiling);
      decode_time(st, true, opts(true, 0, false, 8), "cl_s8", ceiling);
      decode_time(st, false, opts(false, 0, false), "default", ceiling);  // hot
      decode_time(st, false, opts(true, 0, false), "cluster", ceiling);   // hot
    }
    decode_time(st, true, opts(false, 0, false), "default_again", ceiling);
    decode_time(st, true, opts(true, 0, false), "cluster_again", ceiling);
  });
}

// Decode options of the 'decv6' / 'dectrace' variants: the early contract, ring stages before the PDL wait
// (0 = the default: 3 at head dim 64, 2 at 128).
cuda::AttentionOptions v6_opts(bool early, int stages) {
  cuda::AttentionOptions o;
  o.decode_early_kv = early;
  o.decode_early_stages = stages;
  return o;
}

// 'decv6': ring stages issued before the PDL wait under the early contract (1, 2, 3, default) against the
// default (no contract) in one process; both again at the end of each shape (drift check). (Call 2 of "Decode
// attention v6" also timed L2 prefetches beyond the ring and bulk L2 prefetches: removed, see RESULTS.md.)
void decode_v6() {
  const double ceiling = decode_read_ceiling();
  for_each_variant_shape([&](DecodeSetup& st, int batch) {
    decode_time(st, true, v6_opts(false, 0), "default", ceiling);
    decode_time(st, true, v6_opts(true, 0), "early", ceiling);
    for (int n : {1, 2, 3}) decode_time(st, true, v6_opts(true, n), ("early_s" + std::to_string(n)).c_str(), ceiling);
    if (batch == 1) decode_time(st, false, v6_opts(false, 0), "default", ceiling);  // hot
    decode_time(st, true, v6_opts(false, 0), "default_again", ceiling);
    decode_time(st, true, v6_opts(true, 0), "early_again", ceiling);
  });
}

// Decode options of the 'dectma' / 'dectrace' variants: the early contract, its ring stages before the wait
// (0 = default) and AttentionOptions::decode_tma (-1 = default: TMA under the contract in one-wave grids; 0 =
// cp.async; 1 = TMA 64-key tiles; 2 = 32-key tiles x 6 stages; head dim 64 only).
cuda::AttentionOptions tma_opts(bool early, int tma, int stages = 0) {
  cuda::AttentionOptions o = v6_opts(early, stages);
  o.decode_tma = tma;
  return o;
}

// 'dectma': the defaults (without / with the early contract) against the early contract's previous default
// (cp.async, 3 stages before the wait) and TMA with 1 / 3 stages before the wait, in one process; the early rows
// again at the end of each shape (drift check). Head dim 128 ignores decode_tma: only the defaults there.
// (Call 1 of "Decode attention v7" also timed TMA without the contract and with 256-byte L2 promotion.)
void decode_tma_table() {
  const double ceiling = decode_read_ceiling();
  for_each_variant_shape([&](DecodeSetup& st, int batch) {
    decode_time(st, true, tma_opts(false, -1), "default", ceiling);
    decode_time(st, true, tma_opts(true, -1), "early", ceiling);
    if (st.d == 64) {
      decode_time(st, true, tma_opts(true, 0), "early_cp", ceiling);
      decode_time(st, true, tma_opts(true, 1, 1), "tma1_early_s1", ceiling);
      decode_time(st, true, tma_opts(true, 1, 3), "tma1_early_s3", ceiling);
      decode_time(st, true, tma_opts(true, 2, 1), "tma2_early_s1", ceiling);
      decode_time(st, true, tma_opts(true, 2, 2), "tma2_early_s2", ceiling);
      if (batch == 1) decode_time(st, false, tma_opts(true, -1), "early", ceiling);  // hot
      decode_time(st, true, tma_opts(true, 0), "early_cp_again", ceiling);
    }
    decode_time(st, true, tma_opts(true, -1), "early_again", ceiling);
  });
}

// 'dectrace' (only with decode.cu built with MK_DECODE_TRACE=1): per-CTA globaltimer stamps of 64 back-to-back
// cold calls at 32k, batch 1 (default options; the early contract with its default; cp.async and TMA variants
// under it), averaged over calls 4..59: where the time between two calls' ends goes (placement of the next
// call's CTAs, PDL wait release, K/V loop, publish + arrival, last CTA's combine).
void decode_trace() {
  const char* names[6] = {"default", "early", "early_cp", "tma1_early_s1", "tma1_early_s3", "tma2_early_s2"};
  const cuda::AttentionOptions opts[6] = {tma_opts(false, -1), tma_opts(true, -1), tma_opts(true, 0),
                                          tma_opts(true, 1, 1), tma_opts(true, 1, 3), tma_opts(true, 2, 2)};
  for (int d : {64, 128})
    for (int variant = 0; variant < (d == 64 ? 6 : 2); ++variant) {
    DecodeSetup st(d, 32768, 1);
    const cuda::AttentionOptions opt = opts[variant];
    const int calls = 64, ctas = cuda::attention_decode_splits(1, HKV, st.len, opt) * HKV;
    cudaStream_t s;
    ATT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ATT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) MK_CHECK(cuda::attention_decode(s, st.args(i % st.nbuf), opt).ok());
    ATT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    ATT_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    ATT_CUDA_CHECK(cudaGraphLaunch(ge, s));  // warm-up (untraced)
    ATT_CUDA_CHECK(cudaStreamSynchronize(s));
    DevBuf<unsigned long long> buf(size_t(calls) * ctas * 8);
    ATT_CUDA_CHECK(cudaMemset(buf.ptr, 0, buf.n * 8));
    if (cuda::attn::decode_trace_arm(buf.ptr, buf.n * 8) != cudaSuccess) {
      std::printf("[trace] not a trace build (MK_DECODE_TRACE=0)\n");
      return;
    }
    ATT_CUDA_CHECK(cudaGraphLaunch(ge, s));
    ATT_CUDA_CHECK(cudaStreamSynchronize(s));
    ATT_CUDA_CHECK(cuda::attn::decode_trace_arm(nullptr, 0));
    const std::vector<unsigned long long> r = buf.download();
    auto t = [&](int c, int i, int k) { return double(r[(size_t(c) * ctas + i) * 8 + 1 + k]); };
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    double acc[13] = {};
    int n = 0;
    for (int c = 4; c < calls - 4; ++c, ++n) {
      double prev_end = 0, end = 0, first0 = 1e30, first1 = 1e30, min2 = 1e30, max2 = 0;
      std::vector<double> w0, w1, loop, t2, pub, comb;
      for (int i = 0; i < ctas; ++i) {
        prev_end = std::max(prev_end, t(c - 1, i, 5));
        end = std::max(end, t(c, i, 5));
      }
      for (int i = 0; i < ctas; ++i) {
        first0 = std::min(first0, t(c, i, 0));
        first1 = std::min(first1, t(c, i, 1));
        w0.push_back(t(c, i, 0) - prev_end);
        w1.push_back(t(c, i, 1) - prev_end);
        loop.push_back(t(c, i, 2) - t(c, i, 1));
        t2.push_back(t(c, i, 2) - prev_end);
        min2 = std::min(min2, t(c, i, 2));
        max2 = std::max(max2, t(c, i, 2));
        pub.push_back(t(c, i, 4) - t(c, i, 2));
        if (r[(size_t(c) * ctas + i) * 8] >> 48) comb.push_back(t(c, i, 5) - t(c, i, 4));
      }
      const double v[13] = {end - prev_end, first0 - prev_end, first1 - prev_end, med(w1), med(loop),
                            *std::max_element(loop.begin(), loop.end()), med(t2), max2 - prev_end, max2 - min2,
                            med(pub), comb.empty() ? 0 : med(comb), end - max2, med(w0)};
      for (int k = 0; k < 13; ++k) acc[k] += v[k];
    }
    std::printf("[trace] D=%d 32k batch 1 %s, %d CTAs, mean over %d calls (us; 0 = the previous call's last CTA end):\n"
                "  period %.2f | CTA entry first %+.2f, median %+.2f | PDL wait release first %+.2f, median %+.2f |\n"
                "  K/V loop median %.2f, max %.2f | loop end median %+.2f, last %+.2f (spread %.2f) |\n"
                "  publish + fence + arrive median %.2f | last CTAs' combine median %.2f | last loop end -> call end %.2f\n",
                d, names[variant], ctas, n, acc[0] / n * 1e-3, acc[1] / n * 1e-3, acc[12] / n * 1e-3, acc[2] / n * 1e-3,
                acc[3] / n * 1e-3, acc[4] / n * 1e-3,
                acc[5] / n * 1e-3, acc[6] / n * 1e-3, acc[7] / n * 1e-3, acc[8] / n * 1e-3, acc[9] / n * 1e-3,
                acc[10] / n * 1e-3, acc[11] / n * 1e-3);
    std::fflush(stdout);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool want_prefill = argc == 1, want_ablation = argc == 1, want_decode = argc == 1, quick = false, want_settle = false,
       want_focus = false, want_clust = false, want_trace = false, want_clock = false, want_ncu = false,
       want_v6 = false, want_tma = false, want_knobs = false, want_pfocus = false, want_ptrace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    want_prefill |= a == "prefill";
    want_ablation |= a == "ablation";
    want_decode |= a == "decode";
    quick |= a == "quick";
    want_settle |= a == "settle";
    want_focus |= a == "decfocus";
    want_clust |= a == "decclust";
    want_trace |= a == "dectrace";
    want_v6 |= a == "decv6";
    want_tma |= a == "dectma";
    want_clock |= a == "clock";
    want_ncu |= a == "ncu";
    want_knobs |= a == "knobs";
    want_pfocus |= a == "pfocus";
    want_ptrace |= a == "ptrace";
    g_no_hopper |= a == "nohopper";
  }
  cudaDeviceProp prop{};
  ATT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (want_focus) decode_focus();
  if (want_clust) decode_cluster();
  if (want_v6) decode_v6();
  if (want_tma) decode_tma_table();
  if (want_trace) decode_trace();
  if (want_decode) decode_table(quick);
  if (want_prefill) prefill_table(quick);
  if (want_ablation) ablation();
  if (want_settle) settle();
  if (want_clock) clock_probe();
  if (want_ncu) ncu_target();
  if (want_knobs) knobs();
  if (want_pfocus) prefill_focus();
  if (want_ptrace) prefill_trace();
  return 0;
}
#endif
