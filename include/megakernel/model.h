// Loading a Hugging Face model folder: config.json (+ generation_config.json) -> ModelConfig, and
// *.safetensors -> Weights (memory-mapped, validated, bound by the family's tensor names).
//
//   auto m = mk::load_model("/models/Llama-3.2-1B");
//   if (!m) { fprintf(stderr, "%s\n", m.message().c_str()); return 1; }
//   m->weights.layers[0].wq  // [q_dim, n_embd] view into the mapping
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "megakernel/config.h"
#include "model/shapes.h"  // shape_config(name): published model shapes
#include "model/weights.h"

namespace mk {

struct Model {
  ModelConfig config;
  Weights weights;
};

struct LoadOptions {
  // Page the weights in while loading (madvise WILLNEED + touching every page), so the first forward
  // pass does not stall on disk. Off: pages come in lazily on first use.
  bool prefault = true;
  // Progress bar on stderr while paging in: Auto draws it only when stderr is a terminal.
  enum class Progress { Auto, Always, Never } progress = Progress::Auto;
  // Called with (bytes paged in, total bytes) while paging in, whatever `progress` says.
  std::function<void(uint64_t done, uint64_t total)> on_progress;
};

// Reads config.json (+ optional generation_config.json) and the safetensors weights of `dir`.
// Every error names the file and the field or tensor that was wrong and what was expected.
Expected<Model> load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

// Reads only the configuration of a model folder (no weights).
Expected<ModelConfig> load_config(const std::filesystem::path& dir);

// A model of the given shapes with small random weights in owned host memory (no files): matrices
// and embeddings ~ N(0, 0.02^2), norm weights ~ 1 + N(0, 0.02^2), biases ~ N(0, 0.02^2). The same
// (config, dtype, seed) gives the same bits. For benchmarks and tests.
Model make_random_model(const ModelConfig& config, DType dtype, uint64_t seed);

// Parameters, counting a tied LM head once.
uint64_t parameter_count(const Weights& weights);
// Bytes one decode step reads: every weight once, the embedding table only one row, and the
// LM head (the embedding matrix itself when tied) in full.
uint64_t decode_bytes_per_token(const ModelConfig& config, const Weights& weights);
// The same from shapes alone, all weights in `dtype`.
uint64_t decode_bytes_per_token(const ModelConfig& config, DType dtype);

}  // namespace mk
