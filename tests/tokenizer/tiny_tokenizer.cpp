// The test tokenizer of tiny_tokenizer.h.
#include "tiny_tokenizer.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

#include "tokenizer/byte_level.h"

namespace mk::test {

nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(tok::byte_to_utf8(static_cast<uint8_t>(b)))] = b;
  // Merges, in rank order ("Ġ" is the space byte).
  const char* merges[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}, {"o", "o"}};
  json merge_list = json::array();
  int next = 256;
  for (auto& m : merges) {
    const std::string merged = std::string(m[0]) + m[1];
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merge_list.push_back(std::string(m[0]) + " " + m[1]);
  }
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       json::array({
           {{"id", next}, {"content", "<|bos|>"}, {"special", true}, {"normalized", false}},
           {{"id", next + 1}, {"content", "<|eos|>"}, {"special", true}, {"normalized", false}},
           {{"id", next + 2}, {"content", "<think>"}, {"special", false}, {"normalized", false}},
           {{"id", next + 3}, {"content", "[R]"}, {"special", false}, {"normalized", false}, {"rstrip", true}},
       })},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                       {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merge_list}}},
  };
  return j;
}

std::filesystem::path write_tokenizer(const nlohmann::json& j, const nlohmann::json& config) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mk_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  if (!config.is_null()) std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir;
}

std::filesystem::path real_tokenizer_dir(const std::string& name) {
  const char* env = std::getenv("MK_TOKENIZER_DATA");
  const std::filesystem::path root =
      env ? std::filesystem::path(env) : std::filesystem::path(MK_SOURCE_DIR) / ".." / "shared" / "data" / "tokenizers";
  const auto dir = root / name;
  return std::filesystem::exists(dir / "tokenizer.json") ? dir : std::filesystem::path();
}

}  // namespace mk::test
