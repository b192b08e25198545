// Where a layered prefill's time goes between the host and the GPU: `prefill_launch [SHAPE] [T,...]` (random weights)
// times, for each prompt length and each launch mode of CudaBackend (eager; CUDA graph captured after or before a
// length's first chunk):
//   host   the host's time to enqueue one prefill (enqueue_prefill_only), median, us
//   wall   events around the enqueue, as `megakernel bench` times a prefill (the GPU may wait for the host), ms
//   gpu    the same with the stream held by a host callback until the host has enqueued everything: GPU time, ms
//   first  a mode's first call of a length: its host time (at = 1: with the capture before running; at = 2: the
//          eager launch and the capture after it, in its shadow) and its wall time
// If host >= gpu, or wall > gpu, the host's launch rate is on the critical path and a graph saves the difference.
#if !defined(MK_HAVE_CUDA)
#include <cstdio>
int main() {
  std::puts("prefill_launch: built without CUDA");
  return 0;
}
#else
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/device_weights.h"
#include "model/shapes.h"

namespace {

using namespace mk;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

void CUDART_CB hold(void* flag) {  // blocks the stream until the host releases it (2 s at most: never a deadlock)
  auto* f = static_cast<std::atomic<int>*>(flag);
  const auto t0 = std::chrono::steady_clock::now();
  while (f->load(std::memory_order_acquire) == 0 && us_since(t0) < 2e6) {
  }
}

struct Mode {
  const char* name;
  int graphs, at;
};

struct Row {
  double host_us, wall_ms, gpu_ms;
};

// One timed call: wall (events around the enqueue) or gpu (the stream held until the enqueue is done).
Row timed_call(cuda::CudaBackend& b, const std::vector<int32_t>& toks, bool gated) {
  cudaStream_t s = b.stream();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::atomic<int> flag{0};
  if (gated) cudaLaunchHostFunc(s, hold, &flag);
  cudaEventRecord(e0, s);
  b.truncate(0);
  auto t0 = std::chrono::steady_clock::now();
  Status st = b.enqueue_prefill_only(toks, 0);
  const double host = us_since(t0);
  cudaEventRecord(e1, s);
  flag.store(1, std::memory_order_release);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!st) std::fprintf(stderr, "prefill failed: %s\n", st.message().c_str());
  return {host, ms, ms};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "llama-3.2-1b";
  std::vector<int> lengths = {2, 8, 32, 128, 1024};
  if (argc > 2) {
    lengths.clear();
    std::stringstream ss(argv[2]);
    for (std::string t; std::getline(ss, t, ',');) lengths.push_back(std::atoi(t.c_str()));
  }
  auto c = shape_config(shape);
  if (!c) return std::fprintf(stderr, "%s\n", c.message().c_str()), 1;
  auto w = cuda::random_device_weights(*c, 1234, true);
  if (!w) return std::fprintf(stderr, "%s\n", w.message().c_str()), 1;
  const Mode modes[] = {{"eager", 0, 2}, {"graph at=2", 16, 2}, {"graph at=1", 16, 1}};
  std::mt19937 rng(7);
  std::printf("prefill_launch %s: host us (enqueue) | wall ms (events) | gpu ms (stream held) | first call host us / wall ms\n",
              shape.c_str());
  for (const Mode& m : modes) {
    cuda::CudaBackendOptions opt;
    opt.prefill_graphs = m.graphs;
    opt.prefill_graph_at = m.at;
    auto b = cuda::CudaBackend::create(*c, w->alias(), 2048, opt);
    if (!b) return std::fprintf(stderr, "%s\n", b.message().c_str()), 1;
    for (int T : lengths) {
      std::vector<int32_t> toks(static_cast<size_t>(T));
      for (auto& t : toks) t = int32_t(rng() % uint32_t(c->n_vocab));
      const Row first = timed_call(**b, toks, false);
      for (int i = 0; i < 3; ++i) timed_call(**b, toks, false);  // warm-up (captures at = 2 graphs)
      std::vector<double> host, wall, gpu;
      for (int r = 0; r < 9; ++r) {
        Row a = timed_call(**b, toks, false);
        Row g = timed_call(**b, toks, true);
        host.push_back(a.host_us);
        wall.push_back(a.wall_ms);
        gpu.push_back(g.gpu_ms);
      }
      std::printf("  %-20s T %5d  host %8.1f us  wall %7.3f ms  gpu %7.3f ms  first %8.1f us / %7.3f ms\n", m.name, T,
                  median(host), median(wall), median(gpu), first.host_us, first.wall_ms);
    }
  }
  return 0;
}
#endif
