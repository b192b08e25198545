// Published hyperparameters (config.json + generation_config.json of the Hugging Face releases) of
// the models we benchmark, so that benchmarks run at real sizes without downloads.
#include "model/shapes.h"

namespace mk {
namespace {

struct Shape {
  const char* name;
  const char* architecture;
  Family family;
  int n_vocab, n_embd, n_ff, n_layer, n_head, n_kv_head, head_dim;
  float rms_norm_eps, rope_theta;
  float llama3_factor;  // 0: no rope scaling
  int max_position;
  bool tied;
  int32_t bos;
  std::vector<int32_t> eos;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"llama-3.2-1b", "LlamaForCausalLM", Family::Llama, 128256, 2048, 8192, 16, 32, 8, 64, 1e-5f,
       500000.f, 32.f, 131072, true, 128000, {128001, 128008, 128009}},
      {"llama-3.2-3b", "LlamaForCausalLM", Family::Llama, 128256, 3072, 8192, 28, 24, 8, 128, 1e-5f,
       500000.f, 32.f, 131072, true, 128000, {128001, 128008, 128009}},
      {"llama-3.1-8b", "LlamaForCausalLM", Family::Llama, 128256, 4096, 14336, 32, 32, 8, 128, 1e-5f,
       500000.f, 8.f, 131072, false, 128000, {128001, 128008, 128009}},
      {"qwen2.5-0.5b", "Qwen2ForCausalLM", Family::Qwen2, 151936, 896, 4864, 24, 14, 2, 64, 1e-6f,
       1000000.f, 0.f, 32768, true, 151643, {151645, 151643}},
      {"qwen2.5-1.5b", "Qwen2ForCausalLM", Family::Qwen2, 151936, 1536, 8960, 28, 12, 2, 128, 1e-6f,
       1000000.f, 0.f, 32768, true, 151643, {151645, 151643}},
      {"qwen3-0.6b", "Qwen3ForCausalLM", Family::Qwen3, 151936, 1024, 3072, 28, 16, 8, 128, 1e-6f,
       1000000.f, 0.f, 40960, true, 151643, {151645, 151643}},
      {"qwen3-1.7b", "Qwen3ForCausalLM", Family::Qwen3, 151936, 2048, 6144, 28, 16, 8, 128, 1e-6f,
       1000000.f, 0.f, 40960, true, 151643, {151645, 151643}},
      {"qwen3-4b", "Qwen3ForCausalLM", Family::Qwen3, 151936, 2560, 9728, 36, 32, 8, 128, 1e-6f,
       1000000.f, 0.f, 40960, true, 151643, {151645, 151643}},
      {"qwen3-8b", "Qwen3ForCausalLM", Family::Qwen3, 151936, 4096, 12288, 36, 32, 8, 128, 1e-6f,
       1000000.f, 0.f, 40960, false, 151643, {151645, 151643}},
  };
  return s;
}

}  // namespace

std::vector<std::string> shape_names() {
  std::vector<std::string> out;
  for (const auto& s : shapes()) out.push_back(s.name);
  return out;
}

Expected<ModelConfig> shape_config(std::string_view name) {
  for (const auto& s : shapes()) {
    if (name != s.name) continue;
    ModelConfig c;
    c.architecture = s.architecture;
    c.family = s.family;
    c.n_vocab = s.n_vocab;
    c.n_embd = s.n_embd;
    c.n_ff = s.n_ff;
    c.n_layer = s.n_layer;
    c.n_head = s.n_head;
    c.n_kv_head = s.n_kv_head;
    c.head_dim = s.head_dim;
    c.rms_norm_eps = s.rms_norm_eps;
    c.rope.theta = s.rope_theta;
    if (s.llama3_factor > 0) {  // Llama 3.1/3.2: factor, low 1, high 4, original context 8192
      c.rope.type = "llama3";
      c.rope.factor = s.llama3_factor;
      c.rope.low_freq_factor = 1.f;
      c.rope.high_freq_factor = 4.f;
      c.rope.original_max_position = 8192;
    }
    c.max_position = s.max_position;
    c.tie_word_embeddings = s.tied;
    c.qkv_bias = s.family == Family::Qwen2;
    c.qk_norm = s.family == Family::Qwen3;
    c.bos_token_id = s.bos;
    c.eos_token_ids = s.eos;
    c.torch_dtype = "bfloat16";
    return c;
  }
  std::string known;
  for (const auto& n : shape_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error("unknown model shape '", name, "' (known: ", known, ")");
}

}  // namespace mk
