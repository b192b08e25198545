// `megakernel inspect --model DIR [--json]`: what a model folder holds: family, architecture, shapes,
// RoPE, parameter count, bytes read per decoded token (the bandwidth floor of a decode step: every
// weight once, one embedding row, the LM head in full), KV cache bytes per token, dtypes per group
// of weights. Reads the headers only: the weights are not paged in.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli/commands.h"
#include "megakernel/model.h"
#include "model/family.h"

namespace mk::cli {
namespace {

using json = nlohmann::ordered_json;  // keeps the fields in the order written

struct InspectFlags {
  std::string model;
  bool json = false;
};

// "BF16" or "BF16+F32" for a group of tensors.
std::string dtypes_of(std::initializer_list<const TensorView*> first, const std::vector<LayerWeights>& layers,
                      std::initializer_list<const TensorView LayerWeights::*> per_layer) {
  std::set<std::string> s;
  for (const TensorView* t : first)
    if (t->present()) s.insert(std::string(dtype_name(t->dtype)));
  for (const auto& l : layers)
    for (auto m : per_layer)
      if ((l.*m).present()) s.insert(std::string(dtype_name((l.*m).dtype)));
  std::string out;
  for (const auto& d : s) out += (out.empty() ? "" : "+") + d;
  return out.empty() ? "-" : out;
}

// A float config value as the decimal it was written as (1e-05, not 9.99999974e-06).
double shortest(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", double(f));
  return std::strtod(buf, nullptr);
}

json summary(const std::string& dir, const Model& m) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  json rope = {{"type", c.rope.type}, {"theta", shortest(c.rope.theta)}};
  if (c.rope.type == "llama3")
    rope.update({{"factor", shortest(c.rope.factor)},
                 {"low_freq_factor", shortest(c.rope.low_freq_factor)},
                 {"high_freq_factor", shortest(c.rope.high_freq_factor)},
                 {"original_max_position", c.rope.original_max_position}});
  const size_t kv_elem = w.tok_embd.present() ? dtype_size(w.tok_embd.dtype) : 2;
  json dtypes = {
      {"embeddings", dtypes_of({&w.tok_embd}, {}, {})},
      {"attention", dtypes_of({}, w.layers, {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv,
                                             &LayerWeights::wo, &LayerWeights::bq, &LayerWeights::bk,
                                             &LayerWeights::bv})},
      {"mlp", dtypes_of({}, w.layers, {&LayerWeights::w_gate, &LayerWeights::w_up, &LayerWeights::w_down})},
      {"norms", dtypes_of({&w.final_norm}, w.layers, {&LayerWeights::attn_norm, &LayerWeights::mlp_norm,
                                                      &LayerWeights::q_norm, &LayerWeights::k_norm})},
      {"lm_head", dtypes_of({&w.lm_head}, {}, {})},
  };
  return {
      {"model", dir},
      {"family", std::string(family_name(c.family))},
      {"architecture", c.architecture},
      {"n_layer", c.n_layer},
      {"n_embd", c.n_embd},
      {"n_ff", c.n_ff},
      {"n_head", c.n_head},
      {"n_kv_head", c.n_kv_head},
      {"head_dim", c.head_dim},
      {"q_dim", c.q_dim()},
      {"kv_dim", c.kv_dim()},
      {"n_vocab", c.n_vocab},
      {"max_position", c.max_position},
      {"rms_norm_eps", shortest(c.rms_norm_eps)},
      {"rope", rope},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"qkv_bias", c.qkv_bias},
      {"qk_norm", c.qk_norm},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_ids", c.eos_token_ids},
      {"torch_dtype", c.torch_dtype},
      {"parameters", parameter_count(w)},
      {"decode_bytes_per_token", decode_bytes_per_token(c, w)},
      {"kv_bytes_per_token", uint64_t(2) * uint64_t(c.n_layer) * uint64_t(c.kv_dim()) * kv_elem},
      {"dtypes", dtypes},
  };
}

std::string with_unit(double v, const char* unit) {
  char buf[64];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.3f G%s", v / 1e9, unit);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.3f M%s", v / 1e6, unit);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.3f k%s", v / 1e3, unit);
  else std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
  return buf;
}

void print_text(const json& s) {
  auto line = [](const char* k, const std::string& v) { std::printf("%-22s %s\n", k, v.c_str()); };
  auto num = [](const json& v) { return v.dump(); };
  line("model", s["model"].get<std::string>());
  line("family", s["family"].get<std::string>() + " (" + s["architecture"].get<std::string>() + ")");
  line("layers", num(s["n_layer"]));
  line("hidden size", num(s["n_embd"]));
  line("intermediate size", num(s["n_ff"]));
  line("attention heads", num(s["n_head"]) + " query, " + num(s["n_kv_head"]) + " key/value, head_dim " +
                              num(s["head_dim"]) + " (q_dim " + num(s["q_dim"]) + ", kv_dim " + num(s["kv_dim"]) + ")");
  line("vocabulary", num(s["n_vocab"]));
  line("max positions", num(s["max_position"]));
  line("rms_norm_eps", num(s["rms_norm_eps"]));
  std::string rope;
  for (const auto& [k, v] : s["rope"].items()) rope += (rope.empty() ? "" : ", ") + k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
  line("rope", rope);
  line("tied embeddings", s["tie_word_embeddings"].get<bool>() ? "yes" : "no");
  line("qkv bias / qk norm", std::string(s["qkv_bias"].get<bool>() ? "yes" : "no") + " / " + (s["qk_norm"].get<bool>() ? "yes" : "no"));
  line("bos / eos ids", num(s["bos_token_id"]) + " / " + num(s["eos_token_ids"]));
  line("parameters", num(s["parameters"]) + " (" + with_unit(s["parameters"].get<double>(), "") + ")");
  line("decode bytes/token", num(s["decode_bytes_per_token"]) + " (" +
                                 with_unit(s["decode_bytes_per_token"].get<double>(), "B") + ")");
  line("kv cache bytes/token", num(s["kv_bytes_per_token"]) + " (at the embedding dtype)");
  std::string dt;
  for (const auto& [k, v] : s["dtypes"].items()) dt += (dt.empty() ? "" : ", ") + k + " " + v.get<std::string>();
  line("dtypes", dt);
}

int run_inspect(const InspectFlags& f) {
  LoadOptions o;
  o.prefault = false;  // headers and shapes only
  auto m = load_model(f.model, o);
  if (!m) {
    std::fprintf(stderr, "megakernel inspect: error: %s\n", m.message().c_str());
    return 1;
  }
  const json s = summary(f.model, *m);
  if (f.json) std::printf("%s\n", s.dump(2).c_str());
  else print_text(s);
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  auto flags = std::make_shared<InspectFlags>();
  auto* sub = parent.add_subcommand(
      "inspect", "Show a model folder: family, shapes, RoPE, parameters, bytes per decoded token, dtypes");
  sub->add_option("--model", flags->model, "Model folder (config.json + *.safetensors)")->required();
  sub->add_flag("--json", flags->json, "Print one JSON object instead of text");
  return {sub, [flags] { return run_inspect(*flags); }};
}

}  // namespace mk::cli
