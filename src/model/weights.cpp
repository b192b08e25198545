// Binding checkpoint tensors to Weights by their Hugging Face names, checking dtype and shape against
// the ModelConfig (see weight_slots.h).
#include <cstdlib>
#include <cstring>

#include "model/weight_slots.h"

namespace mk {
namespace {

// A tensor whose bytes are not aligned to its element size (safetensors does not require it: a
// BF16 tensor of odd length shifts every later tensor by 2 bytes) is copied once into an aligned
// buffer, so that every consumer can read whole elements. Checkpoints written by the safetensors
// library are aligned, so this path normally copies nothing.
const void* aligned_data(const void* data, size_t nbytes, size_t align, Weights& w) {
  if (reinterpret_cast<uintptr_t>(data) % align == 0) return data;
  void* copy = std::aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
  MK_CHECK(copy != nullptr);
  std::memcpy(copy, data, nbytes);
  w.storage.push_back(std::shared_ptr<void>(copy, std::free));
  return copy;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += cat(i ? ", " : "", s[i]);
  return out + "]";
}

}  // namespace

std::vector<WeightSlot> weight_slots(const ModelConfig& c, Weights& w) {
  using S = std::vector<int64_t>;
  const int64_t embd = c.n_embd, ff = c.n_ff, q = c.q_dim(), kv = c.kv_dim();
  std::vector<WeightSlot> slots;
  slots.push_back({"model.embed_tokens.weight", S{c.n_vocab, embd}, &w.tok_embd, false});
  w.layers.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[size_t(i)];
    const std::string p = cat("model.layers.", i, ".");
    slots.push_back({p + "input_layernorm.weight", S{embd}, &l.attn_norm, true});
    slots.push_back({p + "self_attn.q_proj.weight", S{q, embd}, &l.wq, false});
    slots.push_back({p + "self_attn.k_proj.weight", S{kv, embd}, &l.wk, false});
    slots.push_back({p + "self_attn.v_proj.weight", S{kv, embd}, &l.wv, false});
    if (c.qkv_bias) {
      slots.push_back({p + "self_attn.q_proj.bias", S{q}, &l.bq, false});
      slots.push_back({p + "self_attn.k_proj.bias", S{kv}, &l.bk, false});
      slots.push_back({p + "self_attn.v_proj.bias", S{kv}, &l.bv, false});
    }
    if (c.qk_norm) {
      slots.push_back({p + "self_attn.q_norm.weight", S{c.head_dim}, &l.q_norm, true});
      slots.push_back({p + "self_attn.k_norm.weight", S{c.head_dim}, &l.k_norm, true});
    }
    slots.push_back({p + "self_attn.o_proj.weight", S{embd, q}, &l.wo, false});
    slots.push_back({p + "post_attention_layernorm.weight", S{embd}, &l.mlp_norm, true});
    slots.push_back({p + "mlp.gate_proj.weight", S{ff, embd}, &l.w_gate, false});
    slots.push_back({p + "mlp.up_proj.weight", S{ff, embd}, &l.w_up, false});
    slots.push_back({p + "mlp.down_proj.weight", S{embd, ff}, &l.w_down, false});
  }
  slots.push_back({"model.norm.weight", S{embd}, &w.final_norm, true});
  if (!c.tie_word_embeddings)
    slots.push_back({"lm_head.weight", S{c.n_vocab, embd}, &w.lm_head, false});
  return slots;
}

Expected<Weights> bind_weights(const ModelConfig& c, const Checkpoint& ck, const std::string& origin) {
  Weights w;
  for (const WeightSlot& s : weight_slots(c, w)) {
    auto it = ck.tensors.find(s.name);
    if (it == ck.tensors.end()) {
      std::string why = s.name == "lm_head.weight" ? " (config.json has tie_word_embeddings false)" : "";
      return make_error(origin, ": tensor '", s.name, "' is missing from the checkpoint (expected shape ",
                        shape_str(s.shape), ")", why);
    }
    const SafetensorsTensor& t = it->second;
    const std::string file = t.file ? t.file->path().string() : origin;
    if (!t.dtype)
      return make_error(file, ": tensor '", s.name, "' has dtype ", t.dtype_name,
                        " (supported: BF16, F16, F32)");
    if (t.shape != s.shape)
      return make_error(file, ": tensor '", s.name, "' has shape ", shape_str(t.shape), ", expected ",
                        shape_str(s.shape), " (from config.json)");
    s.view->dtype = *t.dtype;
    s.view->shape = t.shape;
    s.view->data = aligned_data(t.data, size_t(t.nbytes), dtype_size(*t.dtype), w);
    s.view->name = s.name;
  }
  if (c.tie_word_embeddings) w.lm_head = w.tok_embd;  // same data: the tied LM head
  for (const auto& f : ck.files) w.storage.push_back(f);
  return w;
}

}  // namespace mk
