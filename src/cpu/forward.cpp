// Reference forward pass (see forward.h), one token at a time.
#include "cpu/forward.h"

#include "core/status.h"
#include "cpu/ops.h"

namespace mk::cpu {

KvCache::KvCache(int n_layer, int max_ctx_, int kv_dim_) : max_ctx(max_ctx_), kv_dim(kv_dim_) {
  size_t n = size_t(max_ctx) * size_t(kv_dim);
  k.assign(size_t(n_layer), std::vector<float>(n));
  v.assign(size_t(n_layer), std::vector<float>(n));
}

Forward::Forward(const ModelConfig& config, const Weights& weights, int max_context)
    : config_(config),
      weights_(weights),
      kv_(config.n_layer, max_context, config.kv_dim()),
      h_(size_t(config.n_embd)),
      x_(size_t(config.n_embd)),
      q_(size_t(config.q_dim())),
      k_(size_t(config.kv_dim())),
      v_(size_t(config.kv_dim())),
      attn_(size_t(config.q_dim())),
      out_(size_t(config.n_embd)),
      gate_(size_t(config.n_ff)),
      up_(size_t(config.n_ff)) {
  MK_CHECK(max_context > 0);
  MK_CHECK(int(weights.layers.size()) == config.n_layer);
  MK_CHECK(config.n_kv_head > 0 && config.n_head % config.n_kv_head == 0);
  rope_inv_freq(inv_freq_, config.rope, config.head_dim);
}

void Forward::emit(std::string_view name, int layer, int pos, const std::vector<float>& v) const {
  if (hook_) hook_(name, layer, pos, std::span<const float>(v));
}

void Forward::attention_block(int layer, int pos) {
  const LayerWeights& w = weights_.layers[size_t(layer)];
  const ModelConfig& c = config_;
  rmsnorm(x_.data(), h_.data(), w.attn_norm, c.rms_norm_eps, c.n_embd);
  emit("attn_norm", layer, pos, x_);
  matvec(q_.data(), w.wq, x_.data(), &w.bq);
  matvec(k_.data(), w.wk, x_.data(), &w.bk);
  matvec(v_.data(), w.wv, x_.data(), &w.bv);
  emit("q", layer, pos, q_);
  emit("k", layer, pos, k_);
  emit("v", layer, pos, v_);
  if (w.q_norm.present()) {  // Qwen3: RMSNorm over each head's head_dim values
    for (int h = 0; h < c.n_head; ++h) {
      float* qh = q_.data() + size_t(h) * size_t(c.head_dim);
      rmsnorm(qh, qh, w.q_norm, c.rms_norm_eps, c.head_dim);
    }
    emit("q_norm", layer, pos, q_);
  }
  if (w.k_norm.present()) {
    for (int h = 0; h < c.n_kv_head; ++h) {
      float* kh = k_.data() + size_t(h) * size_t(c.head_dim);
      rmsnorm(kh, kh, w.k_norm, c.rms_norm_eps, c.head_dim);
    }
    emit("k_norm", layer, pos, k_);
  }
  rope(q_.data(), c.n_head, c.head_dim, pos, inv_freq_.data());
  rope(k_.data(), c.n_kv_head, c.head_dim, pos, inv_freq_.data());
  emit("q_rope", layer, pos, q_);
  emit("k_rope", layer, pos, k_);
  std::copy(k_.begin(), k_.end(), kv_.k_at(layer, pos));
  std::copy(v_.begin(), v_.end(), kv_.v_at(layer, pos));
  attention(attn_.data(), q_.data(), kv_.k_at(layer, 0), kv_.v_at(layer, 0), pos + 1, c.n_head, c.n_kv_head,
            c.head_dim);
  emit("attn", layer, pos, attn_);
  matvec(out_.data(), w.wo, attn_.data());
  emit("attn_out", layer, pos, out_);
  add(h_.data(), h_.data(), out_.data(), c.n_embd);
  emit("h_attn", layer, pos, h_);
}

void Forward::mlp_block(int layer, int pos) {
  const LayerWeights& w = weights_.layers[size_t(layer)];
  const ModelConfig& c = config_;
  rmsnorm(x_.data(), h_.data(), w.mlp_norm, c.rms_norm_eps, c.n_embd);
  emit("mlp_norm", layer, pos, x_);
  matvec(gate_.data(), w.w_gate, x_.data());
  matvec(up_.data(), w.w_up, x_.data());
  emit("gate", layer, pos, gate_);
  emit("up", layer, pos, up_);
  swiglu(gate_.data(), gate_.data(), up_.data(), c.n_ff);
  emit("act", layer, pos, gate_);
  matvec(out_.data(), w.w_down, gate_.data());
  emit("mlp_out", layer, pos, out_);
  add(h_.data(), h_.data(), out_.data(), c.n_embd);
  emit("h", layer, pos, h_);
}

void Forward::step(int32_t token, int pos, float* logits) {
  MK_CHECK(pos >= 0 && pos < kv_.max_ctx);
  embed(h_.data(), weights_.tok_embd, token);
  emit("embd", -1, pos, h_);
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    attention_block(layer, pos);
    mlp_block(layer, pos);
  }
  if (!logits) return;
  rmsnorm(x_.data(), h_.data(), weights_.final_norm, config_.rms_norm_eps, config_.n_embd);
  emit("final_norm", -1, pos, x_);
  const TensorView& head = weights_.lm_head.present() ? weights_.lm_head : weights_.tok_embd;
  matvec(logits, head, x_.data());
  if (hook_) hook_("logits", -1, pos, std::span<const float>(logits, size_t(config_.n_vocab)));
}

}  // namespace mk::cpu
