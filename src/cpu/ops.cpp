// Reference ops (see ops.h). fp32 arithmetic; weights are upcast element by element from their
// checkpoint dtype. Mirrors transformers' Llama/Qwen2/Qwen3 modeling code.
#include "cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "core/thread_pool.h"

namespace mk::cpu {

namespace {

// Dot product of one weight row (elements of type T, converted by load) with x[n]. Eight partial sums
// (lane j takes elements j, j + 8, ...) let the compiler vectorise without reordering any single sum.
// (Measured: with bf16 weights this is memory-bound on one core; wider lanes or AVX2 clones gain nothing.)
template <class T, class Load>
float dot_row(const T* w, const float* x, int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int j = 0; j < 8; ++j) acc[j] += load(w[c + j]) * x[c + j];
  for (; c < n; ++c) acc[c % 8] += load(w[c]) * x[c];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// f16 -> f32 of every bit pattern (256 KiB): a lookup is ~5x faster than the branchy conversion.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(size_t(1) << 16);
    for (size_t i = 0; i < t.size(); ++i) t[i] = f16_to_f32(uint16_t(i));
    return t;
  }();
  return table.data();
}

float dot_row(const TensorView& w, int64_t row, const float* x, int64_t cols) {
  switch (w.dtype) {
    case DType::F32:
      return dot_row(static_cast<const float*>(w.data) + row * cols, x, cols, [](float v) { return v; });
    case DType::BF16:
      return dot_row(static_cast<const uint16_t*>(w.data) + row * cols, x, cols,
                     [](uint16_t v) { return bf16_to_f32(v); });
    case DType::F16: {
      const float* table = f16_table();
      return dot_row(static_cast<const uint16_t*>(w.data) + row * cols, x, cols,
                     [table](uint16_t v) { return table[v]; });
    }
  }
  return 0.f;
}

}  // namespace

void embed(float* out, const TensorView& tok_embd, int32_t token) {
  MK_CHECK(tok_embd.shape.size() == 2);
  MK_CHECK(token >= 0 && token < tok_embd.shape[0]);
  int64_t n_embd = tok_embd.shape[1];
  for (int64_t i = 0; i < n_embd; ++i) out[i] = tok_embd.at(size_t(token * n_embd + i));
}

void rmsnorm(float* out, const float* x, const TensorView& w, float eps, int n) {
  MK_CHECK(w.numel() == n);
  float sum_sq = 0.f;
  for (int i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  float inv_rms = 1.f / std::sqrt(sum_sq / float(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = w.at(size_t(i)) * (x[i] * inv_rms);
}

void matvec_rows(float* out, const TensorView& w, const float* x, int64_t row_begin, int64_t row_end,
                 const TensorView* bias) {
  MK_CHECK(w.shape.size() == 2);
  MK_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.shape[0]);
  MK_CHECK(!bias || !bias->present() || bias->numel() == w.shape[0]);
  int64_t cols = w.shape[1];
  bool has_bias = bias && bias->present();
  for (int64_t r = row_begin; r < row_end; ++r) {
    float v = dot_row(w, r, x, cols);
    out[r] = has_bias ? v + bias->at(size_t(r)) : v;
  }
}

void matvec(float* out, const TensorView& w, const float* x, const TensorView* bias) {
  MK_CHECK(w.shape.size() == 2);
  MK_CHECK(out != x);
  // Chunks of at least ~64 KiB of weights, so that small matrices do not pay for the hand-off.
  int64_t min_rows = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, w.shape[1] * dtype_size(w.dtype)));
  ThreadPool::global().parallel_for(w.shape[0], min_rows, [&](int64_t begin, int64_t end) {
    matvec_rows(out, w, x, begin, end, bias);
  });
}

void rope_inv_freq(std::vector<float>& inv_freq, const RopeConfig& rope, int head_dim) {
  MK_CHECK(head_dim > 0 && head_dim % 2 == 0);
  int half = head_dim / 2;
  inv_freq.resize(size_t(half));
  // Default: 1 / theta^(2i / head_dim), each step in fp32 as torch does.
  for (int i = 0; i < half; ++i) {
    float exponent = float(2 * i) / float(head_dim);
    inv_freq[size_t(i)] = 1.f / std::pow(rope.theta, exponent);
  }
  if (rope.type == "default") return;
  MK_CHECK(rope.type == "llama3");
  // llama3: wavelengths longer than old_ctx / low_freq_factor are slowed by `factor`, shorter than
  // old_ctx / high_freq_factor kept, in between interpolated smoothly. Scalars are fp32 as in torch.
  const float factor = rope.factor, low = rope.low_freq_factor, high = rope.high_freq_factor;
  const float old_ctx = float(rope.original_max_position);
  const float low_freq_wavelen = float(double(rope.original_max_position) / double(low));
  const float high_freq_wavelen = float(double(rope.original_max_position) / double(high));
  const float two_pi = float(2.0 * M_PI);
  const float smooth_den = float(double(high) - double(low));
  for (int i = 0; i < half; ++i) {
    float f = inv_freq[size_t(i)];
    float wavelen = two_pi / f;
    float f_llama = wavelen > low_freq_wavelen ? f / factor : f;
    bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (is_medium) {
      float smooth = (old_ctx / wavelen - low) / smooth_den;
      f_llama = (1.f - smooth) * f_llama / factor + smooth * f_llama;
    }
    inv_freq[size_t(i)] = f_llama;
  }
}

void rope(float* x, int n_head, int head_dim, int pos, const float* inv_freq) {
  int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    float angle = float(pos) * inv_freq[i];
    float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < n_head; ++h) {
      float* xh = x + size_t(h) * size_t(head_dim);
      float x0 = xh[i], x1 = xh[i + half];
      xh[i] = x0 * c - x1 * s;
      xh[i + half] = x1 * c + x0 * s;
    }
  }
}

void swiglu(float* out, const float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void attention(float* out, const float* q, const float* k_cache, const float* v_cache, int n_ctx, int n_head,
               int n_kv_head, int head_dim) {
  MK_CHECK(n_ctx > 0 && n_kv_head > 0 && n_head % n_kv_head == 0);
  const int group = n_head / n_kv_head;
  const size_t row = size_t(n_kv_head) * size_t(head_dim);  // stride between positions in the caches
  const float scale = 1.f / std::sqrt(float(head_dim));
  std::vector<float> scores(static_cast<size_t>(n_ctx));  // [n_ctx]
  for (int h = 0; h < n_head; ++h) {
    const float* qh = q + size_t(h) * size_t(head_dim);
    const size_t kv_off = size_t(h / group) * size_t(head_dim);
    float max_score = -INFINITY;
    for (int t = 0; t < n_ctx; ++t) {
      const float* k = k_cache + size_t(t) * row + kv_off;
      float s = 0.f;
      for (int d = 0; d < head_dim; ++d) s += qh[d] * k[d];
      scores[size_t(t)] = s * scale;
      max_score = std::max(max_score, scores[size_t(t)]);
    }
    float sum = 0.f;
    for (int t = 0; t < n_ctx; ++t) {
      scores[size_t(t)] = std::exp(scores[size_t(t)] - max_score);
      sum += scores[size_t(t)];
    }
    float* oh = out + size_t(h) * size_t(head_dim);
    std::fill(oh, oh + head_dim, 0.f);
    for (int t = 0; t < n_ctx; ++t) {
      const float* v = v_cache + size_t(t) * row + kv_off;
      float p = scores[size_t(t)] / sum;
      for (int d = 0; d < head_dim; ++d) oh[d] += p * v[d];
    }
  }
}

int32_t argmax(const float* x, int n) {
  MK_CHECK(n > 0);
  int32_t best = 0;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

void add(float* out, const float* a, const float* b, int n) {
  for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace mk::cpu
