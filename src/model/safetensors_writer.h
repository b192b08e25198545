// Writing safetensors files and whole model folders: used by tests to make checkpoints on the fly
// (and by tools that save converted weights). The header is padded with spaces to 8-byte alignment
// and tensors are stored in the given order, back to back.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "megakernel/model.h"

namespace mk {

struct TensorToWrite {
  std::string name;
  std::string dtype;             // safetensors spelling: "BF16", "F16", "F32", "I64", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;    // nbytes bytes
  size_t nbytes = 0;
};

// Writes one safetensors file. The data sizes must match shape x dtype (checked).
Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// The header bytes (8-byte length + padded JSON) a file of these tensors starts with.
std::string safetensors_header_bytes(const std::vector<TensorToWrite>& tensors,
                                     const std::map<std::string, std::string>& metadata = {});

// config.json content for `c`, in Hugging Face spelling. rope_parameters: transformers-5 style
// ("rope_parameters": {...}) instead of rope_theta + rope_scaling.
nlohmann::json model_config_json(const ModelConfig& c, bool rope_parameters = false);

// Writes config.json and the weights of `m` to `dir` (created if needed): model.safetensors, or
// `n_shards` files model-0000i-of-0000n.safetensors + model.safetensors.index.json.
Status write_model_folder(const std::filesystem::path& dir, const Model& m, int n_shards = 1,
                          bool rope_parameters = false);

}  // namespace mk
