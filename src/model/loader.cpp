// load_model: config + checkpoint + binding, then (optionally) pages the weights in with a progress
// bar, so that the first forward pass does not stall on disk.
#include <algorithm>
#include <optional>

#include "core/progress.h"
#include "megakernel/model.h"
#include "model/weight_slots.h"

namespace mk {
namespace {

struct Range {
  const MappedFile* file;
  const uint8_t* begin;
  size_t n;
};

// The distinct byte ranges of the bound weights (a tied LM head is the embedding table: once).
std::vector<Range> weight_ranges(const ModelConfig& c, const Checkpoint& ck) {
  std::vector<Range> out;
  Weights scratch;  // weight_slots points into a Weights; only the names are used here
  for (const WeightSlot& s : weight_slots(c, scratch)) {
    const auto& t = ck.tensors.at(s.name);
    out.push_back({t.file, static_cast<const uint8_t*>(t.data), size_t(t.nbytes)});
  }
  std::sort(out.begin(), out.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Range& a, const Range& b) { return a.begin == b.begin; }),
            out.end());
  return out;
}

// Reads one byte of every page so that it is resident; `volatile` keeps the reads.
uint8_t touch_pages(const uint8_t* p, size_t n) {
  const volatile uint8_t* v = p;
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i += 4096) acc ^= v[i];
  if (n > 0) acc ^= v[n - 1];
  return acc;
}

void prefault(const std::vector<Range>& ranges, const LoadOptions& opt) {
  uint64_t total = 0;
  for (const Range& r : ranges) total += r.n;
  const bool bar = opt.progress == LoadOptions::Progress::Always ||
                   (opt.progress == LoadOptions::Progress::Auto && stderr_is_tty());
  std::optional<ProgressBar> pb;
  if (bar) pb.emplace("loading weights", total);
  for (const Range& r : ranges)
    r.file->will_need(size_t(r.begin - r.file->data()), r.n);
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  constexpr size_t CHUNK = 16u << 20;  // progress granularity
  for (const Range& r : ranges) {
    for (size_t off = 0; off < r.n; off += CHUNK) {
      const size_t n = std::min(CHUNK, r.n - off);
      sink = sink ^ touch_pages(r.begin + off, n);
      done += n;
      if (pb) pb->update(done);
      if (opt.on_progress) opt.on_progress(done, total);
    }
  }
  if (pb) pb->finish();
  if (opt.on_progress && total == 0) opt.on_progress(0, 0);
}

}  // namespace

Expected<Model> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  auto config = load_config(dir);
  if (!config) return config.error();
  auto ck = open_checkpoint(dir);
  if (!ck) return ck.error();
  auto weights = bind_weights(*config, *ck, dir.string());
  if (!weights) return weights.error();
  if (options.prefault) prefault(weight_ranges(*config, *ck), options);
  return Model{std::move(*config), std::move(*weights)};
}

}  // namespace mk
