// CPU reference decode speed: greedy decode of N tokens after a short prompt, on a model folder or a
// named shape with random weights. Prints ms/token, tokens/s and the weight bytes read per second.
//   build/cpu_decode --model tests/golden/llama_f32 -n 64
//   build/cpu_decode --shape llama-3.2-1b --dtype bf16 -n 8      (MK_NUM_THREADS sets the threads)
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "megakernel/model.h"

using namespace mk;

int main(int argc, char** argv) {
  std::string model_dir, shape, dtype_s = "bf16";
  int n_tokens = 32, prompt_len = 8;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_dir = next();
    else if (a == "--shape") shape = next();
    else if (a == "--dtype") dtype_s = next();
    else if (a == "-n") n_tokens = std::atoi(next().c_str());
    else if (a == "--prompt-len") prompt_len = std::atoi(next().c_str());
    else {
      std::fprintf(stderr, "usage: cpu_decode (--model DIR | --shape NAME [--dtype bf16|f16|f32]) [-n N] [--prompt-len P]\n");
      return 2;
    }
  }
  Model model;
  std::string what;
  if (!model_dir.empty()) {
    auto m = load_model(model_dir);
    if (!m) return std::fprintf(stderr, "%s\n", m.message().c_str()), 1;
    model = std::move(*m);
    what = model_dir;
  } else if (!shape.empty()) {
    auto c = shape_config(shape);
    if (!c) return std::fprintf(stderr, "%s\n", c.message().c_str()), 1;
    DType dt = dtype_s == "f32" ? DType::F32 : dtype_s == "f16" ? DType::F16 : DType::BF16;
    model = make_random_model(*c, dt, 1);
    what = shape + " (random, " + std::string(dtype_name(dt)) + ")";
  } else {
    std::fprintf(stderr, "give --model DIR or --shape NAME\n");
    return 2;
  }
  const ModelConfig& cfg = model.config;
  CpuBackend backend(model, prompt_len + n_tokens + 1);
  std::vector<float> logits(static_cast<size_t>(cfg.n_vocab));
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(int32_t((i * 7919 + 13) % cfg.n_vocab));
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  if (Status s = backend.forward(prompt, 0, logits); !s) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  auto t1 = clock::now();
  std::vector<double> step_ms;
  int pos = prompt_len;
  // Process CPU time as well as wall time: on a shared machine the wall time says little, while
  // CPU-seconds per token (all threads) bound what an idle machine would reach.
  std::clock_t cpu0 = std::clock();
  for (int i = 0; i < n_tokens; ++i) {
    int32_t next = cpu::argmax(logits.data(), cfg.n_vocab);
    auto a = clock::now();
    if (Status s = backend.forward(std::span(&next, 1), pos++, logits); !s)
      return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
    step_ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - a).count());
  }
  double cpu_s_per_token = double(std::clock() - cpu0) / CLOCKS_PER_SEC / n_tokens;
  std::sort(step_ms.begin(), step_ms.end());
  double median = step_ms[step_ms.size() / 2];
  double bytes = double(decode_bytes_per_token(cfg, model.weights));
  std::printf("model      %s\n", what.c_str());
  std::printf("threads    %d\n", ThreadPool::global().n_threads());
  std::printf("prefill    %d tokens in %.1f ms\n", prompt_len, std::chrono::duration<double, std::milli>(t1 - t0).count());
  std::printf("decode     %d tokens: median %.3f ms/token = %.2f tokens/s, %.2f GB/s of weights (%.1f MB/token)\n",
              n_tokens, median, 1000.0 / median, bytes / (median * 1e6), bytes / 1e6);
  std::printf("cpu time   %.3f CPU-ms/token (all threads; idle-machine bound %.2f tokens/s on %d threads)\n",
              cpu_s_per_token * 1e3, ThreadPool::global().n_threads() / cpu_s_per_token,
              ThreadPool::global().n_threads());
  return 0;
}
