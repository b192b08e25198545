// Named shapes of published models (their real config.json hyperparameters), for benchmarks and tests
// that need realistic sizes without downloading anything. Pair with make_random_model (model.h).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"

namespace mk {

// "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen3-0.6b",
// "qwen3-1.7b", "qwen3-4b", "qwen3-8b". Unknown name -> error listing the known ones.
Expected<ModelConfig> shape_config(std::string_view name);
std::vector<std::string> shape_names();

}  // namespace mk
