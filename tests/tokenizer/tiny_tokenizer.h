// A small byte-level BPE tokenizer.json written by the tests themselves (no external files): the 256
// byte-alphabet tokens, a few merges, and added tokens with various flags.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace mk::test {

// The tokenizer as JSON; tests edit it to make broken variants.
nlohmann::json tiny_tokenizer_json();

// Writes `j` (and, if not null, `config` as tokenizer_config.json) into a fresh folder under the temp dir.
std::filesystem::path write_tokenizer(const nlohmann::json& j, const nlohmann::json& config = nullptr);

// Folder of the real tokenizer files (../shared/data/tokenizers/<name>), or "" when absent.
std::filesystem::path real_tokenizer_dir(const std::string& name);

}  // namespace mk::test
