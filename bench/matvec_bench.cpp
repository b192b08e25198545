// Decode matvec probe: `matvec_bench [--kernels K,...] [--shapes RxC,...] [--repeats N] [--trace] [--no-ceiling]`
// times each kernel (bench_probe.h: splitk, splitk-early, read, rowpair; "+bf16x" for a bf16 x) on
// each shape, one launch and per launch in a PDL graph of back-to-back launches over rotating copies, as a share of
// the read ceiling measured first in the same process; --trace adds the graph's timeline from in-kernel timestamps
// (where a launch's time goes). The matvec tuning knobs are environment variables (src/cuda/ops/matvec.cu).
#if !defined(MK_HAVE_CUDA)
#include <cstdio>
int main() {
  std::puts("matvec_bench: built without CUDA");
  return 0;
}
#else
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/backend/bench_probe.h"

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) v.push_back(t);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> kernels{"splitk-early", "read"}, shapes{"8192x2048", "2048x8192"};
  int repeats = 20;
  bool trace = false, ceiling = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--kernels" && has_value) kernels = split(argv[++i]);
    else if (a == "--shapes" && has_value) shapes = split(argv[++i]);
    else if (a == "--repeats" && has_value) repeats = std::atoi(argv[++i]);
    else if (a == "--trace") trace = true;
    else if (a == "--no-ceiling") ceiling = false;
    else {
      std::fprintf(stderr, "matvec_bench: unknown or incomplete argument '%s' (see the header of bench/matvec_bench.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  if (repeats < 1) {
    std::fprintf(stderr, "matvec_bench: --repeats must be >= 1\n");
    return 2;
  }
  double read_tbps = 4.5;  // the H200's measured ceiling, used with --no-ceiling
  if (ceiling) {
    auto rd = mk::cuda::measure_read_ceiling(4.0, 10);
    if (!rd) {
      std::fprintf(stderr, "matvec_bench: %s\n", rd.message().c_str());
      return 1;
    }
    read_tbps = rd->tbps;
    std::printf("read ceiling %.3f TB/s (%s)\n", rd->tbps, rd->best_shape.c_str());
  }
  for (const std::string& sh : shapes) {
    int r = 0, c = 0;
    if (std::sscanf(sh.c_str(), "%dx%d", &r, &c) != 2 || r < 1 || c < 8 || c % 8) {
      std::fprintf(stderr, "matvec_bench: shape '%s': expected ROWSxCOLS with COLS a multiple of 8\n", sh.c_str());
      return 2;
    }
    for (const std::string& k : kernels) {
      auto mv = mk::cuda::measure_matvec(r, c, repeats, k.c_str(), trace);
      if (!mv) {
        std::fprintf(stderr, "matvec_bench: %s %s: %s\n", k.c_str(), sh.c_str(), mv.message().c_str());
        return 1;
      }
      std::printf("%-22s %5dx%-5d one %6.2f us (%3.0f%%)  graph %6.2f us (%5.1f%%)\n", k.c_str(), r, c, mv->us_single,
                  100 * mv->tbps_single / read_tbps, mv->us_chained, 100 * mv->tbps_chained / read_tbps);
      if (!mv->timeline.empty()) std::printf("    %s\n", mv->timeline.c_str());
    }
  }
  return 0;
}
#endif
