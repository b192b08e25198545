// Decode attention with RoPE in the kernel (AttentionDecodeArgs::rope) against the two-kernel path it replaces: the
// RoPE kernel (ops/rope.cu, tested against the CPU in test_ops.cu) writing q and the newest K/V row, then the decode
// attention (tested against the CPU in test_attention_decode.cu). Both apply the same device arithmetic
// (cuda/common/rope_head.cuh), so the outputs and the whole K/V pools must be bit-identical: a wrong q, a missing or
// misplaced K/V row, or a row written by a CTA that reads it before the write all show up.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/ops/rope.h"
#include "test_attention_fixture.h"

namespace mk::attn_test {
namespace {

struct RopeCase {
  int d = 128, n_head = 16, n_kv = 8;
  std::vector<int> lens = {33};
  bool pair_rows = true, qk_norm = true, bias = false, early_kv = true;
  int splits = 0;
};

std::vector<float> random_f32(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void run_rope_case(const RopeCase& c, uint32_t seed) {
  SCOPED_TRACE(cat("D=", c.d, " H=", c.n_head, "/", c.n_kv, " batch=", c.lens.size(), " len0=", c.lens[0],
                   " pair_rows=", c.pair_rows, " qk_norm=", c.qk_norm, " bias=", c.bias, " early_kv=", c.early_kv,
                   " splits=", c.splits));
  std::mt19937 rng(seed);
  const int batch = int(c.lens.size()), d = c.d, row = (c.n_head + 2 * c.n_kv) * d;
  PagedCache a_cache, b_cache;  // the same contents (same seed)
  std::mt19937 rng_a(seed + 1), rng_b(seed + 1);
  a_cache.build(rng_a, c.lens, 64, c.n_kv, d, 5);
  b_cache.build(rng_b, c.lens, 64, c.n_kv, d, 5);
  int max_k = 0;
  for (int l : c.lens) max_k = std::max(max_k, l + 5);

  DevBuf<float> d_qkv, d_bias, d_qn, d_kn, d_inv;
  d_qkv.upload(random_f32(rng, size_t(batch) * row, -2.f, 2.f));
  if (c.bias) d_bias.upload(random_f32(rng, size_t(row), -0.5f, 0.5f));
  if (c.qk_norm) {
    d_qn.upload(random_f32(rng, size_t(d), 0.5f, 1.5f));
    d_kn.upload(random_f32(rng, size_t(d), 0.5f, 1.5f));
  }
  std::vector<float> inv(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) inv[size_t(i)] = std::pow(10000.f, -2.f * float(i) / float(d));
  d_inv.upload(inv);
  DevBuf<int32_t> d_lens, d_pos;
  d_lens.upload(std::vector<int32_t>(c.lens.begin(), c.lens.end()));
  std::vector<int32_t> pos(c.lens.begin(), c.lens.end());
  for (int32_t& p : pos) p -= 1;
  d_pos.upload(pos);

  cuda::AttentionOptions opt;
  opt.decode_early_kv = c.early_kv;
  opt.decode_splits = c.splits;
  opt.decode_tma = 0;  // both paths on cp.async tiles (the kernel with RoPE does not take TMA tiles)
  const size_t ws = cuda::attention_decode_workspace_bytes(batch, c.n_head, c.n_kv, d, max_k, opt);
  DevBuf<float> d_ws(ws / 4 + 4);
  DevBuf<uint16_t> d_q(size_t(batch) * c.n_head * d), d_out_a(d_q.n), d_out_b(d_q.n);
  d_q.poison();
  d_out_a.poison();
  d_out_b.poison();

  // Path A: the RoPE kernel per sequence (q, and the newest K/V row into the cache), then the decode attention.
  for (int b = 0; b < batch; ++b) {
    cuda::RopeQkvArgs r;
    r.qkv = d_qkv.ptr + size_t(b) * row;
    r.pair_rows = c.pair_rows;
    r.bias = c.bias ? d_bias.ptr : nullptr;
    r.q_norm = c.qk_norm ? d_qn.ptr : nullptr;
    r.k_norm = c.qk_norm ? d_kn.ptr : nullptr;
    r.eps = 1e-6f;
    r.inv_freq = d_inv.ptr;
    r.pos0 = d_pos.ptr + b;
    r.n_tokens = 1;
    r.n_head = c.n_head;
    r.n_kv_head = c.n_kv;
    r.head_dim = d;
    r.q_out = reinterpret_cast<cuda::bf16*>(d_q.ptr) + size_t(b) * c.n_head * d;
    r.kv = a_cache.view();
    r.block_table = a_cache.d_table.ptr + size_t(b) * a_cache.max_blocks_per_seq;
    r.max_positions = a_cache.max_blocks_per_seq * a_cache.block_size;
    cuda::rope_qkv(cuda::Stream(nullptr, false), r);
  }
  Status st = cuda::attention_decode(
      nullptr, decode_args(a_cache, d_q, d_out_a, d_lens, d_ws, batch, c.n_head, max_k), opt);
  ASSERT_TRUE(st.ok()) << st.message();
  // Path B: RoPE inside the decode attention; q is not read.
  cuda::AttentionDecodeArgs bargs = decode_args(b_cache, d_q, d_out_b, d_lens, d_ws, batch, c.n_head, max_k);
  bargs.q = nullptr;
  bargs.rope = {.qkv = d_qkv.ptr, .pair_rows = c.pair_rows, .bias = c.bias ? d_bias.ptr : nullptr,
                .q_norm = c.qk_norm ? d_qn.ptr : nullptr, .k_norm = c.qk_norm ? d_kn.ptr : nullptr, .eps = 1e-6f,
                .inv_freq = d_inv.ptr};
  const Status st_b = cuda::attention_decode(nullptr, bargs, opt);
  ASSERT_TRUE(st_b.ok()) << st_b.message();
  ATT_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<uint16_t> out_a = d_out_a.download(), out_b = d_out_b.download();
  EXPECT_TRUE(out_a == out_b) << "attention output differs from the RoPE kernel + attention path";
  bool finite = true;
  for (uint16_t u : out_b) finite = finite && (u & 0x7f80) != 0x7f80;
  EXPECT_TRUE(finite) << "NaN/Inf (or an unwritten, poisoned element) in the output";
  EXPECT_TRUE(a_cache.d_k.download() == b_cache.d_k.download()) << "K pool differs";
  EXPECT_TRUE(a_cache.d_v.download() == b_cache.d_v.download()) << "V pool differs";
}

TEST(AttentionDecodeRope, EqualsRopeKernelThenAttention) {
  uint32_t seed = 1;
  for (int d : {128, 64})
    for (bool early : {true, false}) {
      RopeCase c;
      c.d = d;
      c.early_kv = early;
      run_rope_case(c, seed++);  // Qwen3-0.6B's heads (16 / 8), q/k norm, rope-pair rows, 33 positions
      c.lens = {1};
      run_rope_case(c, seed++);  // the first position: the new row is the only key
      c.lens = {700, 65, 129};
      c.splits = 3;
      run_rope_case(c, seed++);  // several sequences, the newest row in the last split; others hold none
    }
  RopeCase g;  // GQA 24: two 16-head chunks per kv head, both holding the newest row; HF row order, bias, no norm
  g.n_head = 48;
  g.n_kv = 2;
  g.pair_rows = false;
  g.qk_norm = false;
  g.bias = true;
  g.lens = {300};
  run_rope_case(g, 100);
  g.splits = 2;
  g.lens = {64, 1000};
  run_rope_case(g, 101);
  RopeCase one;  // group 1 (Llama-style MHA) with bias and norm
  one.n_head = one.n_kv = 4;
  one.bias = true;
  one.lens = {4097};
  run_rope_case(one, 102);
}

TEST(AttentionDecodeRope, RefusesMissingFrequencies) {
  RopeCase c;
  std::mt19937 rng(3);
  PagedCache cache;
  cache.build(rng, c.lens, 64, c.n_kv, c.d);
  DevBuf<float> d_qkv(size_t(c.n_head + 2 * c.n_kv) * c.d), d_ws(1 << 16);
  DevBuf<uint16_t> d_q(size_t(c.n_head) * c.d), d_out(d_q.n);
  DevBuf<int32_t> d_lens;
  d_lens.upload({33});
  cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, d_ws, 1, c.n_head, 33);
  a.q = nullptr;
  a.rope.qkv = d_qkv.ptr;  // no inv_freq
  const Status st = cuda::attention_decode(nullptr, a);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("inv_freq"), std::string::npos) << st.message();
  a.rope = {};  // and without rope, q is required
  const Status st2 = cuda::attention_decode(nullptr, a);
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("q "), std::string::npos) << st2.message();
}

// The backend's default turns RoPE in attention on only where the kernel keeps its carveout: Qwen3's groups (2, 4)
// and up to 8 query heads per kv head at head dim 128; every group at head dim 64 (a CTA holds at most 16 heads).
TEST(AttentionDecodeRope, FitsTheCarveoutUpToEightHeadsAtHeadDim128) {
  EXPECT_TRUE(cuda::attention_decode_rope_fits(16, 8, 128));
  EXPECT_TRUE(cuda::attention_decode_rope_fits(32, 8, 128));
  EXPECT_TRUE(cuda::attention_decode_rope_fits(64, 8, 128));
  EXPECT_FALSE(cuda::attention_decode_rope_fits(72, 8, 128));
  EXPECT_FALSE(cuda::attention_decode_rope_fits(128, 8, 128));
  EXPECT_TRUE(cuda::attention_decode_rope_fits(48, 2, 64));
  EXPECT_FALSE(cuda::attention_decode_rope_fits(16, 8, 96));  // a head dim the library does not serve
}

}  // namespace
}  // namespace mk::attn_test
