// make_random_model: a model of given shapes with small deterministic random weights in one owned,
// 256-byte-aligned host buffer. Filled in parallel; each 1M-element chunk has its own seed, so the
// result does not depend on the number of threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "megakernel/model.h"
#include "model/weight_slots.h"

namespace mk {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard normal pairs by Box-Muller.
struct Normal {
  uint64_t state;
  bool has_spare = false;
  float spare = 0.f;
  float next() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    const double u1 = (double(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
    const double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare = float(r * std::sin(2 * M_PI * u2));
    has_spare = true;
    return float(r * std::cos(2 * M_PI * u2));
  }
};

void store(void* dst, DType t, size_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(dst)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
  }
}

struct Chunk {
  void* dst;
  size_t begin, end;  // elements
  bool is_norm;
  uint64_t seed;
};

}  // namespace

Model make_random_model(const ModelConfig& config, DType dtype, uint64_t seed) {
  Model m;
  m.config = config;
  auto slots = weight_slots(config, m.weights);
  constexpr size_t ALIGN = 256;
  size_t total = 0;
  std::vector<size_t> offsets;
  for (auto& s : slots) {
    s.view->dtype = dtype;
    s.view->shape = s.shape;
    s.view->name = s.name;
    offsets.push_back(total);
    total += (s.view->nbytes() + ALIGN - 1) / ALIGN * ALIGN;
  }
  void* raw = std::aligned_alloc(ALIGN, std::max<size_t>(total, ALIGN));
  MK_CHECK(raw != nullptr);
  std::shared_ptr<void> arena(raw, std::free);
  constexpr size_t CHUNK = 1u << 20;
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i) {
    auto& s = slots[i];
    s.view->data = static_cast<uint8_t*>(raw) + offsets[i];
    const size_t n = size_t(s.view->numel());
    for (size_t b = 0; b < n; b += CHUNK) {
      uint64_t h = seed ^ (uint64_t(i) << 32) ^ (b / CHUNK);
      chunks.push_back({static_cast<uint8_t*>(raw) + offsets[i], b,
                        std::min(n, b + CHUNK), s.is_norm, splitmix64(h)});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      const Chunk& ch = chunks[c];
      Normal rng{ch.seed};
      for (size_t e = ch.begin; e < ch.end; ++e)
        store(ch.dst, dtype, e, (ch.is_norm ? 1.f : 0.f) + 0.02f * rng.next());
    }
  };
  const size_t n_threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), (chunks.size() + 3) / 4);
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (config.tie_word_embeddings) m.weights.lm_head = m.weights.tok_embd;
  m.weights.storage.push_back(std::move(arena));
  return m;
}

}  // namespace mk
