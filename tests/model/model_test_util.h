// Helpers for the model tests: temporary folders, small configs of each family, file writing.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "megakernel/model.h"
#include "model/safetensors_writer.h"

namespace mk::test {

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/mk_model_test_XXXXXX";
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& s) const { return path_ / s; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A tiny config of each family with odd sizes (GQA ratio 3 or 2, head_dim 8 or 6).
inline ModelConfig tiny_config(Family f) {
  ModelConfig c;
  c.family = f;
  c.n_vocab = 37;
  c.n_embd = 24;
  c.n_ff = 19;
  c.n_layer = 2;
  c.n_head = 6;
  c.n_kv_head = 2;
  c.head_dim = 4;
  c.max_position = 128;
  c.rms_norm_eps = 1e-5f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  switch (f) {
    case Family::Llama:
      c.architecture = "LlamaForCausalLM";
      c.tie_word_embeddings = true;
      c.rope.type = "llama3";
      c.rope.theta = 500000.f;
      c.rope.factor = 8.f;
      c.rope.low_freq_factor = 1.f;
      c.rope.high_freq_factor = 4.f;
      c.rope.original_max_position = 64;
      break;
    case Family::Qwen2:
      c.architecture = "Qwen2ForCausalLM";
      c.qkv_bias = true;
      c.rope.theta = 1000000.f;
      break;
    case Family::Qwen3:
      c.architecture = "Qwen3ForCausalLM";
      c.qk_norm = true;
      c.head_dim = 6;  // q_dim 36 != hidden 24, as in the real Qwen3 models
      c.n_kv_head = 3;
      c.rope.theta = 1000000.f;
      break;
  }
  return c;
}

// Substring check with the whole message in the failure output.
#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg) << "\nlacks: " << (part)

}  // namespace mk::test
