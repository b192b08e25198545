// Host sampler speed at a real vocabulary: `sampler_bench [--vocab N] [--calls N]` times Sampler::sample on random
// N(0, 3^2) logits (a fresh copy per call: the sampler modifies its input) for the parameter sets the engine
// leaves to the host (top-k, top-p, repetition penalty) and, for scale, greedy and temperature alone, and prints
// min and median ms per call in wall time (what a request waits; the sampler uses the process's thread pool) and in
// CPU time of the process (all threads: steadier on a shared machine).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double wall_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  int vocab = 128256, calls = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--vocab")) vocab = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "sampler_bench: unknown option %s (expected --vocab N, --calls N)\n", argv[i]);
      return 2;
    }
  }
  if (vocab < 2 || calls < 1) {
    std::fprintf(stderr, "sampler_bench: --vocab must be >= 2 and --calls >= 1\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = d(rng);
  std::vector<int32_t> history(1000);
  for (auto& t : history) t = int32_t(rng() % uint32_t(vocab));
  struct Row {
    const char* name;
    mk::SamplingParams p;
  };
  auto params = [](float t, int k, float top_p, float min_p, float rep) {
    mk::SamplingParams p;
    p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p, p.repetition_penalty = rep, p.seed = 7;
    return p;
  };
  const Row rows[] = {
      {"greedy", params(0.f, 0, 1.f, 0.f, 1.f)},
      {"temperature 0.8", params(0.8f, 0, 1.f, 0.f, 1.f)},
      {"temperature 0.7 + top-p 0.9", params(0.7f, 0, 0.9f, 0.f, 1.f)},
      {"temperature 0.7 + top-p 0.95", params(0.7f, 0, 0.95f, 0.f, 1.f)},
      {"temperature 0.8 + top-k 40", params(0.8f, 40, 1.f, 0.f, 1.f)},
      {"temperature 0.8 + top-k 40 + top-p 0.9", params(0.8f, 40, 0.9f, 0.f, 1.f)},
      {"all filters + repetition penalty 1.1 (1000 ids)", params(0.8f, 40, 0.9f, 0.05f, 1.1f)},
  };
  std::printf("host sampler, vocabulary %d, %d calls per row (ms per call: wall min / median, CPU min / median)\n", vocab,
              calls);
  for (const Row& r : rows) {
    mk::Sampler s(r.p);
    std::vector<double> wall, cpu;
    std::vector<float> l;
    long long sum = 0;
    for (int c = 0; c < calls; ++c) {
      l = logits;
      const double w0 = wall_ms(), c0 = cpu_ms();
      sum += s.sample(l, history);
      cpu.push_back(cpu_ms() - c0);
      wall.push_back(wall_ms() - w0);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    std::printf("  %-50s wall %7.3f %7.3f   cpu %7.3f %7.3f   (ids sum %lld)\n", r.name, wall.front(),
                wall[wall.size() / 2], cpu.front(), cpu[cpu.size() / 2], sum);
  }
  return 0;
}
