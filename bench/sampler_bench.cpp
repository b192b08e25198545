// Host sampler speed at a real vocabulary: `sampler_bench [--vocab N] [--calls N]` times Sampler::sample on random
// N(0, 3^2) logits (a fresh copy per call: the sampler modifies its input) for the parameter sets the engine
// leaves to the host (top-k, top-p, repetition penalty) and, for scale, greedy and temperature alone, and prints
// min and median ms per call (CPU time of the process, steadier than wall time on a shared machine).
#include <time.h>

#include <algorithm>
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
  std::printf("host sampler, vocabulary %d, %d calls per row (ms per call, CPU time)\n", vocab, calls);
  for (const Row& r : rows) {
    mk::Sampler s(r.p);
    std::vector<double> t;
    std::vector<float> l;
    long long sum = 0;
    for (int c = 0; c < calls; ++c) {
      l = logits;
      const double t0 = cpu_ms();
      sum += s.sample(l, history);
      t.push_back(cpu_ms() - t0);
    }
    std::sort(t.begin(), t.end());
    std::printf("  %-50s min %7.3f  median %7.3f   (ids sum %lld)\n", r.name, t.front(), t[t.size() / 2], sum);
  }
  return 0;
}
