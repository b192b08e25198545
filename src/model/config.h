// config.json (+ generation_config.json) -> ModelConfig. architectures[0] selects the family
// (model/family.h); RoPE is read from either spelling: rope_theta + rope_scaling ({rope_type|type,
// factor, ...}) or transformers-5 rope_parameters ({rope_theta, rope_type, factor, ...}). Supported
// rope types: default, llama3. generation_config.json's eos_token_id (int or list) and bos_token_id
// override config.json's. Tests: tests/model/test_config.cpp.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "megakernel/config.h"

namespace mk {

// Reads and parses a JSON file; errors name the file.
Expected<nlohmann::json> read_json_file(const std::filesystem::path& path);

// Parses a config.json object; `origin` (the file path) starts every error message.
Expected<ModelConfig> parse_model_config(const nlohmann::json& config, const std::string& origin);

// Applies generation_config.json: eos_token_id and bos_token_id, when present, replace config.json's.
Status apply_generation_config(const nlohmann::json& gen, const std::string& origin, ModelConfig& c);

// Consistency checks of a finished config (positive sizes, heads, head_dim, token ids).
Status validate_config(const ModelConfig& c, const std::string& origin);

}  // namespace mk
