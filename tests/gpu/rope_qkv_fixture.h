// Device side of the QKV-with-RoPE matvec tests (test_ops_matvec.cu: MatvecOut::ROPE_QKV; test_ops_matvec_qk_norm.cu:
// ROPE_QKV_NORM): weights and bias in rope-pair order, x and the norm weight, the RoPE table and position, a paged
// K/V cache of two 64-position blocks (block table {1, 0}) and q; args() fills the MatvecArgs both modes share.
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda/ops/matvec.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {

// HF row order -> rope-pair order (device_weights.h): row d < D/2 of a head goes to 2d, row D/2 + d to 2d + 1.
inline int pair_row(int r, int D) {
  const int h = r / D, d = r % D;
  return h * D + (d < D / 2 ? 2 * d : 2 * (d - D / 2) + 1);
}

struct RopeQkvDevice {
  static constexpr int kBlocks = 2, kBlockSize = 64, kCapacity = kBlocks * kBlockSize;
  int n_head, n_kv, D, E, R;
  DeviceArray<uint16_t> w, k_cache, v_cache, q;  // w: [R, E] bf16 in pair order; caches [kCapacity, n_kv * D]
  DeviceArray<float> x, g, bias, inv_freq, out;  // bias in pair order; out: unused by the RoPE modes
  DeviceArray<int32_t> pos, table;

  // w_hf: [R = (n_head + 2 n_kv) D, E] bf16 bits and b: [R], both in HF row order.
  RopeQkvDevice(const std::vector<uint16_t>& w_hf, const std::vector<float>& b, const std::vector<float>& x_host,
                const std::vector<float>& g_host, const std::vector<float>& inv_freq_host, int n_head_, int n_kv_,
                int D_, int E_, int position)
      : n_head(n_head_), n_kv(n_kv_), D(D_), E(E_), R((n_head_ + 2 * n_kv_) * D_),
        w(pair_order(w_hf, size_t(E_))), k_cache(size_t(kCapacity) * n_kv_ * D_),
        v_cache(size_t(kCapacity) * n_kv_ * D_), q(size_t(n_head_) * D_), x(x_host), g(g_host), bias(pair_order(b, 1)),
        inv_freq(inv_freq_host), out(size_t(R)), pos(std::vector<int32_t>{position}),
        table(std::vector<int32_t>{1, 0}) {}

  // Rows of `rows` (R rows of `width` elements) moved to rope-pair order.
  template <class T>
  std::vector<T> pair_order(const std::vector<T>& rows, size_t width) const {
    std::vector<T> p(rows.size());
    for (int r = 0; r < R; ++r)
      std::memcpy(p.data() + size_t(pair_row(r, D)) * width, rows.data() + size_t(r) * width, width * sizeof(T));
    return p;
  }

  // Row of position p in the caches (block table[p / 64]), in elements; SIZE_MAX past the capacity.
  size_t cache_row(int p) const {
    return p < kCapacity ? size_t((p < kBlockSize ? 1 : 0) * kBlockSize + p % kBlockSize) * size_t(n_kv) * D : SIZE_MAX;
  }

  void poison() {
    k_cache.poison();
    v_cache.poison();
    q.poison();
  }

  cuda::MatvecArgs args(cuda::MatvecOut mode, bool with_bias, float eps) const {
    cuda::MatvecArgs a;
    a.w = reinterpret_cast<const __nv_bfloat16*>(w.p);
    a.n_rows = R;
    a.n_cols = E;
    a.x = x.p;
    a.norm_w = g.p;
    a.eps = eps;
    a.bias = with_bias ? bias.p : nullptr;
    a.out = out.p;
    a.mode = mode;
    a.rope.inv_freq = inv_freq.p;
    a.rope.pos = pos.p;
    a.rope.head_dim = D;
    a.rope.n_head = n_head;
    a.rope.n_kv_head = n_kv;
    a.rope.q_out = reinterpret_cast<__nv_bfloat16*>(q.p);
    a.rope.kv = {reinterpret_cast<__nv_bfloat16*>(k_cache.p), reinterpret_cast<__nv_bfloat16*>(v_cache.p), kBlocks,
                 kBlockSize, n_kv, D};
    a.rope.block_table = table.p;
    a.rope.max_positions = kCapacity;
    return a;
  }
};

}  // namespace mk::gpu_test
