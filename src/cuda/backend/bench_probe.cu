// Ceilings and matvec probes for `megakernel bench` (see bench_probe.h).
#include "cuda/backend/bench_probe.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/bench_timing.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/sm_count.h"
#include "cuda/ops/gemm.h"
#include "cuda/ops/matvec_internal.h"

namespace mk::cuda {
namespace {

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    // Two bf16 in (-1, 1): no NaN/Inf when the buffer is read as bf16.
    p[i] = (x & 0x807f807fu) | 0x3f003f00u;
  }
}

// The "read" probe: a read-only grid-stride kernel over the matrix's bytes (4 loads in flight per thread, the first
// ones issued before the PDL wait, the next launch released right after it), the reference for what any kernel
// streams at that size in the same chain of launches.
__global__ void __launch_bounds__(1024) read_probe_kernel(const uint4* __restrict__ p, size_t n, unsigned* out,
                                                          unsigned long long* trace) {
  constexpr int LOADS = 4;
  const unsigned long long t_start = trace ? globaltimer_ns() : 0;  // as MatvecArgs::trace
  unsigned long long t_waited = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  unsigned acc = 0;
  bool waited = false;
  for (; i + (LOADS - 1) * stride < n; i += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) v[j] = ld_stream(p + i + j * stride);
    if (!waited) {
      pdl_wait();
      pdl_launch_dependents();
      waited = true;
      if (trace) t_waited = globaltimer_ns();
    }
#pragma unroll
    for (int j = 0; j < LOADS; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (!waited) {
    pdl_wait();
    pdl_launch_dependents();
    if (trace) t_waited = globaltimer_ns();
  }
  for (; i < n; i += stride) {
    const uint4 a = ld_stream(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // practically never: keeps the loads alive
  if (trace && threadIdx.x == 0) {
    unsigned long long* t = trace + 4 * size_t(blockIdx.x);
    t[0] = sm_id(), t[1] = t_start, t[2] = t_waited, t[3] = globaltimer_ns();
  }
}

// The chained graph's timeline from the kernels' traces (`trace`: [chain][max_blocks][4] as MatvecArgs::trace,
// `blocks` used per launch), medians over the middle half of the launches, in us.
std::string timeline(const std::vector<unsigned long long>& trace, int chain, int max_blocks, int blocks) {
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> period, lag, spread, body, tail, early_frac, early_lead;
  double prev_end = 0;
  for (int i = 0; i < chain; ++i) {
    std::vector<double> start, staged, end;
    for (int b = 0; b < blocks; ++b) {
      const unsigned long long* t = &trace[(size_t(i) * max_blocks + b) * 4];
      start.push_back(double(t[1]) * 1e-3), staged.push_back(double(t[2]) * 1e-3), end.push_back(double(t[3]) * 1e-3);
    }
    std::sort(staged.begin(), staged.end());
    std::vector<double> ends = end;
    std::sort(ends.begin(), ends.end());
    const double last = ends.back(), e50 = ends[ends.size() / 2], e90 = ends[ends.size() * 9 / 10];
    if (i >= chain / 4 && i < 3 * chain / 4) {
      period.push_back(last - prev_end);
      lag.push_back(staged.front() - prev_end);
      spread.push_back(staged.back() - staged.front());
      body.push_back(e50 - staged.front());
      tail.push_back(last - e90);
      int n_early = 0;
      std::vector<double> lead;
      for (double t0 : start)
        if (t0 < prev_end) ++n_early, lead.push_back(prev_end - t0);
      early_frac.push_back(double(n_early) / blocks);
      early_lead.push_back(med(lead));
    }
    prev_end = last;
  }
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "period %.2f | prev end -> first staged %.2f | staged spread %.2f | first staged -> median end %.2f | "
                "last 10%% of ends %.2f | blocks started before prev end %.0f%% (by %.2f)",
                med(period), med(lag), med(spread), med(body), med(tail), 100 * med(early_frac), med(early_lead));
  return buf;
}

}  // namespace

Expected<MatmulRate> measure_matmul_rate(int n, int repeats) {
  auto g = Gemm::create();
  if (!g) return g.error();
  size_t elems = size_t(n) * size_t(n);
  DevBuf a, b, c;
  MK_TRY(cuda_status(cudaMalloc(&a.p, elems * 2), "allocating matmul operands"));
  MK_TRY(cuda_status(cudaMalloc(&b.p, elems * 2), "allocating matmul operands"));
  MK_TRY(cuda_status(cudaMalloc(&c.p, elems * 2), "allocating matmul operands"));
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(a.p), elems / 2, 7u);
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(b.p), elems / 2, 11u);
  CUDA_CHECK_LAUNCH();
  auto run = [&] {
    (*g)->run(nullptr, c.p, DType::BF16, static_cast<const bf16*>(a.p), static_cast<const bf16*>(b.p), n, n, n);
  };
  double ms = median_event_ms(nullptr, run, repeats, 10);
  MK_TRY(cuda_status(cudaDeviceSynchronize(), "measuring the matmul rate"));
  MatmulRate r;
  r.ms = ms;
  r.tflops = 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
  return r;
}

Expected<MatvecRate> measure_matvec(int n_rows, int n_cols, int repeats, const char* kernel, bool trace) {
  // Options after the name, in any order: +bf16x (x in bf16, as the down projection's), +norm (the RMSNorm of x
  // folded in, as the QKV / gate-up / LM-head projections'), +swiglu / +add (those output modes; the decode's gate-up
  // and O / down projections).
  std::string kname = kernel;
  bool x_bf16 = false, norm = false, swiglu = false, add = false;
  for (size_t plus; (plus = kname.rfind('+')) != std::string::npos; kname.resize(plus)) {
    const std::string opt = kname.substr(plus + 1);
    bool* flag = opt == "bf16x" ? &x_bf16 : opt == "norm" ? &norm : opt == "swiglu" ? &swiglu : opt == "add" ? &add : nullptr;
    if (!flag) return make_error("matvec probe: option '+", opt, "' of '", kernel, "' is not known (bf16x, norm, swiglu, add)");
    *flag = true;
  }
  if (kname != "splitk" && kname != "splitk-early" && kname != "rowpair" && kname != "read")
    return make_error("matvec probe: kernel '", kernel,
                      "' is not known (expected splitk, splitk-early, rowpair or read, optionally +bf16x, +norm, "
                      "+swiglu, +add)");
  if (swiglu && (add || n_rows % 2)) return make_error("matvec probe: +swiglu needs an even row count and no +add");
  size_t mat_bytes = size_t(n_rows) * size_t(n_cols) * 2;
  int copies = int(std::max<size_t>(8, (size_t(512) << 20) / mat_bytes + 1));
  DevBuf w, x, y, nw;
  MK_TRY(cuda_status(cudaMalloc(&w.p, mat_bytes * copies), "allocating matvec probe"));
  MK_TRY(cuda_status(cudaMalloc(&nw.p, size_t(n_cols) * 4), "allocating matvec probe"));
  MK_TRY(cuda_status(cudaMalloc(&x.p, size_t(n_cols) * 4), "allocating matvec probe"));
  MK_TRY(cuda_status(cudaMalloc(&y.p, size_t(n_rows) * 4 * copies), "allocating matvec probe"));
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(w.p), mat_bytes * copies / 4, 3u);
  fill_kernel<<<64, 256>>>(static_cast<uint32_t*>(x.p), size_t(n_cols), 5u);  // read as f32: small values
  fill_kernel<<<64, 256>>>(static_cast<uint32_t*>(nw.p), size_t(n_cols), 7u);
  CUDA_CHECK_LAUNCH();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto args = [&](int i) {
    MatvecArgs a;
    a.trigger_at_start = kname == "splitk-early";
    a.w = static_cast<const bf16*>(w.p) + size_t(i % copies) * size_t(n_rows) * n_cols;
    a.n_rows = n_rows;
    a.n_cols = n_cols;
    if (x_bf16) a.x_bf16 = static_cast<const bf16*>(x.p);
    else a.x = static_cast<const float*>(x.p);
    a.out = static_cast<float*>(y.p) + size_t(i % copies) * n_rows;
    if (norm) a.norm_w = static_cast<const float*>(nw.p);
    if (swiglu) a.mode = MatvecOut::SWIGLU;
    if (add) a.mode = MatvecOut::ADD;
    return a;
  };
  const int sms = sm_count();
  auto mv = [&](const MatvecArgs& a) {
    if (kname == "read")
      launch(Stream(s, true), dim3(2 * sms), dim3(1024), 0, read_probe_kernel, reinterpret_cast<const uint4*>(a.w),
             mat_bytes / 16, reinterpret_cast<unsigned*>(a.out), a.trace);
    else if (kname == "rowpair") matvec_rowpair(Stream(s, true), a);
    else matvec_splitk(Stream(s, true), a);
  };
  int it = 0;
  double single = median_event_ms(s, [&] { mv(args(it++)); }, repeats * 4, 3);
  // Chained: a graph of `chain` matvecs over rotating copies (the decode pattern), per-matvec time.
  const int chain = 64;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < chain; ++i) mv(args(i));
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  double chained = median_event_ms(s, [&] { CUDA_CHECK(cudaGraphLaunch(ge, s)); }, repeats, 3) / chain;
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  std::string line;
  if (trace && (kname == "read" || kname.starts_with("splitk"))) {  // the same graph, traced (one more launch)
    constexpr int MAX_BLOCKS = 1024;
    DevBuf tb;
    const size_t words = size_t(chain) * MAX_BLOCKS * 4;
    MK_TRY(cuda_status(cudaMalloc(&tb.p, words * 8), "allocating the matvec trace"));
    MK_TRY(cuda_status(cudaMemset(tb.p, 0, words * 8), "clearing the matvec trace"));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < chain; ++i) {
      MatvecArgs a = args(i);
      a.trace = static_cast<unsigned long long*>(tb.p) + size_t(i) * MAX_BLOCKS * 4;
      mv(a);
    }
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_CHECK(cudaGraphLaunch(ge, s));
    CUDA_CHECK(cudaGraphLaunch(ge, s));  // the second run's stamps: warm instruction caches, as the timed runs
    std::vector<unsigned long long> h(words);
    MK_TRY(cuda_status(cudaMemcpyAsync(h.data(), tb.p, words * 8, cudaMemcpyDeviceToHost, s), "reading the trace"));
    MK_TRY(cuda_status(cudaStreamSynchronize(s), "reading the matvec trace"));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    int blocks = 0;  // blocks of a launch: the written records
    while (blocks < MAX_BLOCKS && h[size_t(blocks) * 4 + 3] != 0) ++blocks;
    line = timeline(h, chain, MAX_BLOCKS, blocks) + " | " + std::to_string(blocks) + " blocks";
  }
  MK_TRY(cuda_status(cudaStreamSynchronize(s), "measuring the matvec"));
  cudaStreamDestroy(s);
  MatvecRate r;
  r.n_rows = n_rows;
  r.n_cols = n_cols;
  r.us_single = single * 1e3;
  r.us_chained = chained * 1e3;
  r.tbps_single = double(mat_bytes) / (single * 1e-3) / 1e12;
  r.tbps_chained = double(mat_bytes) / (chained * 1e-3) / 1e12;
  r.timeline = line;
  return r;
}

}  // namespace mk::cuda
