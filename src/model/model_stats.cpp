// Parameter count and bytes read per decoded token (the memory-bandwidth floor of a decode step).
#include "megakernel/model.h"
#include "model/weight_slots.h"

namespace mk {

uint64_t parameter_count(const Weights& w) {
  uint64_t n = 0;
  auto add = [&](const TensorView& t) { n += t.present() ? uint64_t(t.numel()) : 0; };
  add(w.tok_embd);
  for (const auto& l : w.layers)
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm,
                                &l.k_norm, &l.wo, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down})
      add(*t);
  add(w.final_norm);
  if (w.lm_head.data != w.tok_embd.data) add(w.lm_head);
  return n;
}

uint64_t decode_bytes_per_token(const ModelConfig& c, const Weights& w) {
  uint64_t b = 0;
  auto add = [&](const TensorView& t) { b += t.present() ? t.nbytes() : 0; };
  for (const auto& l : w.layers)
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm,
                                &l.k_norm, &l.wo, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down})
      add(*t);
  add(w.final_norm);
  add(w.lm_head);  // the whole matrix, also when it is the (tied) embedding table
  if (w.tok_embd.present()) b += uint64_t(c.n_embd) * dtype_size(w.tok_embd.dtype);  // one row
  return b;
}

uint64_t decode_bytes_per_token(const ModelConfig& c, DType dtype) {
  Weights w;
  for (const WeightSlot& s : weight_slots(c, w)) {
    s.view->dtype = dtype;
    s.view->shape = s.shape;
    s.view->data = &w;  // any non-null pointer: "present"
  }
  if (c.tie_word_embeddings) w.lm_head = w.tok_embd;
  return decode_bytes_per_token(c, w);
}

}  // namespace mk
