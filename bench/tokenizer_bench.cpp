// Tokenizer encode speed: `tokenizer_bench --tokenizer DIR --file TEXT [--repeat N]` encodes the whole file
// (one thread, one call) N + 1 times and prints one JSON line: bytes, tokens, a hash of the ids, MB/s of the
// first run (cold cache) and the median of the others (wall and process CPU time), and the load time. bench/tokenizer_bench.py runs it
// beside the Python package `tokenizers` on the same text.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <time.h>
#include <string>
#include <vector>

#include "megakernel/tokenizer.h"

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the process: on a shared machine it is steadier than wall time.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
  std::string dir, file;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--file")) file = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  if (dir.empty() || file.empty()) {
    std::fprintf(stderr, "usage: tokenizer_bench --tokenizer DIR --file TEXT [--repeat N]\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto tok = mk::Tokenizer::load(dir);
  if (!tok) return std::fprintf(stderr, "error: %s\n", tok.message().c_str()), 1;
  const double load_s = seconds_since(t0);
  std::ifstream f(file, std::ios::binary);
  if (!f) return std::fprintf(stderr, "error: cannot open %s\n", file.c_str()), 1;
  std::ostringstream buf;
  buf << f.rdbuf();
  const std::string text = buf.str();

  std::vector<double> runs, cpu_runs;
  std::vector<int32_t> ids;
  for (int r = 0; r < repeat + 1; ++r) {
    t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    ids = tok->encode(text);
    cpu_runs.push_back(cpu_seconds() - c0);
    runs.push_back(seconds_since(t0));
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the ids
  for (int32_t id : ids) hash = (hash ^ static_cast<uint32_t>(id)) * 1099511628211ull;
  std::vector<double> warm(runs.begin() + 1, runs.end()), warm_cpu(cpu_runs.begin() + 1, cpu_runs.end());
  std::sort(warm.begin(), warm.end());
  std::sort(warm_cpu.begin(), warm_cpu.end());
  const double mb = text.size() / 1e6;
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"ids_fnv1a\": \"%016llx\", \"load_s\": %.3f, "
              "\"mb_per_s_cold\": %.2f, \"mb_per_s_warm\": %.2f, \"mb_per_cpu_s_warm\": %.2f}\n",
              text.size(), ids.size(), static_cast<unsigned long long>(hash), load_s, mb / runs[0],
              mb / warm[warm.size() / 2], mb / warm_cpu[warm_cpu.size() / 2]);
  return 0;
}
