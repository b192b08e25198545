// Model families: how an `architectures[0]` name of config.json maps to a Family and which config
// quirks it has. Each family is one file in src/model/families/ defining a FamilySpec; the list in
// families/registry.cpp names them (a static library would drop self-registering objects).
// Adding a family: a Family value in megakernel/config.h, families/<name>.cpp, one line in registry.cpp.
#pragma once
#include <string_view>
#include <vector>

#include "core/status.h"
#include "megakernel/config.h"
#include "model/config_reader.h"

namespace mk {

struct FamilySpec {
  const char* architecture;   // config.json architectures[0], e.g. "LlamaForCausalLM"
  const char* name;           // short name, e.g. "llama"
  Family family;
  int default_max_position;   // max_position_embeddings when config.json omits it
  // Runs after the common fields are read and before validation: sets family flags (qkv_bias,
  // qk_norm), defaults (head_dim) and rejects config values the family's forward pass lacks.
  Status (*apply)(const ConfigReader& config, ModelConfig& c);
};

const FamilySpec* find_family(std::string_view architecture);  // null when unknown
const FamilySpec& family_spec(Family f);
const std::vector<const FamilySpec*>& all_families();
std::string_view family_name(Family f);  // "llama", "qwen2", "qwen3"

// Shared quirk checks for the families' apply functions.
Status require_false(const ConfigReader& config, std::string_view key, std::string_view why);
Status require_silu(const ConfigReader& config);

}  // namespace mk
