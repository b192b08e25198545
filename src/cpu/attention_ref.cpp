// Float64 (or naive-bf16-emulating) reference of the paged GPU attention; see attention_ref.h.
#include "cpu/attention_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace mk::cpu {
namespace {

double round_bf16(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

const float* kv_row(const float* pool, const PagedKvHost& kv, int b, int pos, int hk) {
  int blk = kv.block_table[int64_t(b) * kv.max_blocks_per_seq + pos / kv.kv_block_size];
  int64_t row = int64_t(blk) * kv.kv_block_size + pos % kv.kv_block_size;
  return pool + (row * kv.n_kv_head + hk) * kv.head_dim;
}

}  // namespace

void attention_prefill(double* out, double* lse, const float* q, const int32_t* cu_seqlens_q,
                       const int32_t* seq_lens_k, const PagedKvHost& kv, int batch, int n_head, float scale,
                       bool causal, RefPrecision precision) {
  const int d = kv.head_dim, group = n_head / kv.n_kv_head;
  const bool naive = precision == RefPrecision::NAIVE_BF16;
  std::vector<double> s;
  for (int b = 0; b < batch; ++b) {
    const int q0 = cu_seqlens_q[b], q_len = cu_seqlens_q[b + 1] - q0, kv_len = seq_lens_k[b];
    for (int i = 0; i < q_len; ++i) {
      const int n_vis = causal ? kv_len - q_len + i + 1 : kv_len;
      for (int h = 0; h < n_head; ++h) {
        const int hk = h / group;
        const float* qr = q + (int64_t(q0 + i) * n_head + h) * d;
        double* o = out + (int64_t(q0 + i) * n_head + h) * d;
        s.assign(n_vis > 0 ? n_vis : 0, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < n_vis; ++j) {
          const float* kr = kv_row(kv.k, kv, b, j, hk);
          double acc = 0;
          if (naive) {
            float accf = 0;
            for (int c = 0; c < d; ++c) accf += qr[c] * kr[c];
            acc = round_bf16(round_bf16(accf) * scale);
          } else {
            for (int c = 0; c < d; ++c) acc += double(qr[c]) * kr[c];
            acc *= scale;
          }
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (int j = 0; j < n_vis; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int c = 0; c < d; ++c) o[c] = 0;
        for (int j = 0; j < n_vis; ++j) {
          const float* vr = kv_row(kv.v, kv, b, j, hk);
          const double p = naive ? round_bf16(s[j] / sum) : s[j] / sum;
          for (int c = 0; c < d; ++c) o[c] += p * vr[c];
        }
        if (naive)
          for (int c = 0; c < d; ++c) o[c] = round_bf16(float(o[c]));
        if (lse) lse[int64_t(q0 + i) * n_head + h] = n_vis > 0 ? mx + std::log(sum) : -INFINITY;
      }
    }
  }
}

}  // namespace mk::cpu
