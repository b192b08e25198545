// GPU attention vs the float64 CPU reference (src/cpu/attention_ref.h), FlashAttention-3's rule: the kernel's
// relative error is at most ~2x that of a naive bf16 run (+1e-4). Random inputs, ragged lengths, lengths not a
// multiple of the tile, 1-token queries, causal and not, GQA 1/4/6/8/16, head dims 64/128, scattered pool
// blocks; outputs poisoned (NaN) before every run, so unwritten elements fail. Run: test_gpu --gtest_filter='Attention*'
#include <gtest/gtest.h>

#include "test_attention_fixture.h"

namespace mk::attn_test {
namespace {

struct PrefillCase {
  std::vector<int> q_lens, kv_lens;
  int n_head, n_kv_head, head_dim, block_size;
  bool causal;
  float q_sigma = 1.f;  // larger: peakier softmax, more rescaling
  cuda::AttentionOptions opt = {};
};

std::string describe(const PrefillCase& c) {
  std::string s = cat("D=", c.head_dim, " H=", c.n_head, "/", c.n_kv_head, " bs=", c.block_size,
                      " causal=", c.causal, " qsig=", c.q_sigma, " kernel=", int(c.opt.prefill_kernel),
                      " poly=", c.opt.poly_exp2_fraction, " lazy=", c.opt.lazy_rescale, " q/kv:");
  for (size_t i = 0; i < c.q_lens.size(); ++i) s += cat(" ", c.q_lens[i], "/", c.kv_lens[i]);
  return s;
}

// out_bits (optional): the output's bf16 bits, for comparing kernels.
void run_prefill(const PrefillCase& c, uint32_t seed, std::vector<uint16_t>* out_bits = nullptr) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  const int batch = int(c.q_lens.size());
  PagedCache cache;
  cache.build(rng, c.kv_lens, c.block_size, c.n_kv_head, c.head_dim);
  std::vector<int32_t> cu(batch + 1, 0);
  int max_q = 0, max_k = 0;
  for (int b = 0; b < batch; ++b) {
    cu[b + 1] = cu[b] + c.q_lens[b];
    max_q = std::max(max_q, c.q_lens[b]);
    max_k = std::max(max_k, c.kv_lens[b]);
  }
  const int total_q = cu[batch];
  std::vector<uint16_t> q_bits;
  std::vector<float> q;
  random_bf16(rng, size_t(total_q) * c.n_head * c.head_dim, c.q_sigma, q_bits, q);
  DevBuf<uint16_t> d_q, d_out(q_bits.size());
  DevBuf<float> d_lse(size_t(total_q) * c.n_head);
  DevBuf<int32_t> d_cu, d_lens;
  d_q.upload(q_bits);
  d_cu.upload(cu);
  d_lens.upload(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end()));
  d_out.poison();
  d_lse.poison();

  cuda::AttentionPrefillArgs a;
  a.q = reinterpret_cast<const cuda::bf16*>(d_q.ptr);
  a.out = reinterpret_cast<cuda::bf16*>(d_out.ptr);
  a.lse = d_lse.ptr;
  a.cu_seqlens_q = d_cu.ptr;
  a.seq_lens_k = d_lens.ptr;
  a.kv = cache.view();
  a.block_table = cache.table_view();
  a.batch = batch;
  a.total_q = total_q;
  a.max_seqlen_q = max_q;
  a.max_seqlen_k = max_k;
  a.n_head = c.n_head;
  a.causal = c.causal;
  Status st = cuda::attention_prefill(nullptr, a, c.opt);
  ASSERT_TRUE(st.ok()) << st.message();
  ATT_CUDA_CHECK(cudaDeviceSynchronize());

  const float scale = 1.f / std::sqrt(float(c.head_dim));
  std::vector<double> ref(q.size()), naive(q.size()), ref_lse(size_t(total_q) * c.n_head);
  cpu::attention_prefill(ref.data(), ref_lse.data(), q.data(), cu.data(), c.kv_lens.data(), cache.host(), batch,
                         c.n_head, scale, c.causal);
  cpu::attention_prefill(naive.data(), nullptr, q.data(), cu.data(), c.kv_lens.data(), cache.host(), batch, c.n_head,
                         scale, c.causal, cpu::RefPrecision::NAIVE_BF16);
  bool finite = false;
  const std::vector<uint16_t> out = d_out.download();
  if (out_bits) *out_bits = out;
  const double err = rel_err_bf16(out, ref, &finite);
  const double err_naive = rel_err_d(naive, ref);
  EXPECT_TRUE(finite) << "NaN/Inf in output (unwritten or overflow)";
  EXPECT_LE(err, 2.0 * err_naive + 1e-4) << "naive bf16 error " << err_naive;
  const std::vector<float> lse = d_lse.download();
  double lse_max_err = 0;
  for (size_t i = 0; i < lse.size(); ++i) lse_max_err = std::max(lse_max_err, std::abs(lse[i] - ref_lse[i]));
  EXPECT_LE(lse_max_err, 2e-3) << "LSE";
}

// Hopper kernel shape: overlap (intra-warpgroup), ping-pong (between warpgroups), consumer warpgroups (0 = default),
// CTA order (longest first in head sections, or head after head).
struct HopperShape {
  bool overlap = true, pingpong = true;
  int wgs = 0;
  bool lpt = true;
};

cuda::AttentionOptions opts(cuda::PrefillKernel k, float poly = 0.25f, bool lazy = true, HopperShape hs = {}) {
  cuda::AttentionOptions o;
  o.hopper_overlap = hs.overlap;
  o.hopper_pingpong = hs.pingpong;
  o.hopper_consumer_warpgroups = hs.wgs;
  o.hopper_lpt_schedule = hs.lpt;
  o.prefill_kernel = k;
  o.poly_exp2_fraction = poly;
  o.lazy_rescale = lazy;
  return o;
}

// poly: the FA-4 (a) fraction of the ragged and GQA cases (the default options run 0: the lean Hopper instances).
void prefill_sweep(cuda::PrefillKernel kernel, HopperShape hs = {}, float poly = 0.25f) {
  uint32_t seed = 1;
  for (int d : {64, 128})
    for (bool causal : {true, false}) {
      // ragged, not tile multiples, 1-token queries, chunked prefill (kv longer than q)
      run_prefill({{1, 77, 130, 64}, {1, 82, 330, 64}, 8, 2, d, 64, causal, 1.f, opts(kernel, poly, true, hs)}, seed++);
      for (int ratio : {1, 4, 6, 8})
        run_prefill({{200, 33}, {200, 97}, 2 * ratio, 2, d, 128, causal, 1.f, opts(kernel, poly, true, hs)}, seed++);
      // peaky softmax with the FA-4 switches in every combination
      for (float poly : {0.f, 0.5f, 1.f})
        for (bool lazy : {false, true})
          run_prefill({{257}, {300}, 4, 1, d, 64, causal, 4.f, opts(kernel, poly, lazy, hs)}, seed++);
    }
}

TEST(AttentionPrefill, SimpleMatchesReference) { prefill_sweep(cuda::PrefillKernel::SIMPLE); }
TEST(AttentionPrefill, AutoMatchesReference) { prefill_sweep(cuda::PrefillKernel::AUTO); }
// AUTO runs SIMPLE up to simple_max_q queries per sequence and HOPPER above: its bits are that kernel's. (A single
// query row can come out the same from both kernels, so the test also asks that each side had a case where they
// differ.)
TEST(AttentionPrefill, AutoTakesSimpleForShortQueries) {
  const int limit = cuda::AttentionOptions{}.simple_max_q;
  int told_apart[2] = {0, 0};  // [simple side, hopper side]
  for (int q_len : {1, 32, limit, limit + 1, 300}) {
    auto run = [&](cuda::PrefillKernel k) {
      std::vector<uint16_t> out;
      run_prefill({{q_len, 5}, {q_len + 40, 5}, 8, 2, 64, 64, true, 1.f, opts(k, 0.f)}, 11, &out);
      return out;
    };
    const bool simple = q_len <= limit;
    const std::vector<uint16_t> got = run(cuda::PrefillKernel::AUTO);
    const std::vector<uint16_t> chosen = run(simple ? cuda::PrefillKernel::SIMPLE : cuda::PrefillKernel::HOPPER);
    const std::vector<uint16_t> other = run(simple ? cuda::PrefillKernel::HOPPER : cuda::PrefillKernel::SIMPLE);
    told_apart[simple ? 0 : 1] += chosen != other;
    EXPECT_EQ(got, chosen) << "q_len " << q_len << ": AUTO should run " << (simple ? "SIMPLE" : "HOPPER");
  }
  EXPECT_GT(told_apart[0], 0) << "SIMPLE and HOPPER gave the same bits on every short case: the test proves nothing";
  EXPECT_GT(told_apart[1], 0) << "SIMPLE and HOPPER gave the same bits on every long case: the test proves nothing";
}

// The default options (no polynomial): the lean instances, causal and not, at both head dims.
TEST(AttentionPrefill, HopperDefaultsMatchReference) { prefill_sweep(cuda::PrefillKernel::HOPPER, {}, 0.f); }
TEST(AttentionPrefill, HopperNoOverlapMatchesReference) {
  prefill_sweep(cuda::PrefillKernel::HOPPER, {.overlap = false});
}
// Head dim 64 also with 2 consumer warpgroups (128-row Q tiles), with and without ping-pong.
TEST(AttentionPrefill, HopperTwoWarpgroupsMatchesReference) {
  prefill_sweep(cuda::PrefillKernel::HOPPER, {.wgs = 2});
}
TEST(AttentionPrefill, HopperNoPingPongMatchesReference) {
  prefill_sweep(cuda::PrefillKernel::HOPPER, {.pingpong = false, .wgs = 2, .lpt = false});
  prefill_sweep(cuda::PrefillKernel::HOPPER, {.overlap = false, .pingpong = false});
}

TEST(AttentionPrefill, LongSequenceRescaling) {
  // A rising score trend forces the running max to grow many times; both kernels, lazy and eager.
  for (auto k : {cuda::PrefillKernel::SIMPLE, cuda::PrefillKernel::AUTO})
    for (bool lazy : {false, true})
      for (int d : {64, 128}) run_prefill({{1100}, {1100}, 2, 1, d, 64, true, 3.f, opts(k, 0.25f, lazy)}, 99 + lazy);
}

// Small cases for compute-sanitizer (memcheck, racecheck): bench/attention_run.sh filters on AttentionSanitize.
TEST(AttentionSanitize, PrefillSmall) {
  for (auto k : {cuda::PrefillKernel::SIMPLE, cuda::PrefillKernel::AUTO})
    for (int d : {64, 128}) {
      run_prefill({{70, 1}, {135, 64}, 4, 1, d, 64, true, 1.f, opts(k)}, 7);
      run_prefill({{300}, {300}, 2, 1, d, 64, false, 1.f, opts(k, 0.25f, true, {.overlap = false})}, 8);
    }
  // 2 consumer warpgroups at head dim 64, ping-pong off; a kv block size of 128 with 3 tiles and a ring wrap
  run_prefill({{130, 5}, {400, 200}, 4, 2, 64, 128, true, 1.f,
               opts(cuda::PrefillKernel::HOPPER, 0.25f, true, {.pingpong = false, .wgs = 2})}, 9);
  run_prefill({{300}, {700}, 2, 1, 128, 128, false, 1.f, opts(cuda::PrefillKernel::HOPPER, 0.f)}, 10);
  // head dim 128 causal on the default (lean) instance, ragged: CTAs past a short sequence's queries return early
  run_prefill({{300, 70}, {700, 200}, 4, 1, 128, 64, true, 1.f, opts(cuda::PrefillKernel::HOPPER, 0.f)}, 11);
}

TEST(AttentionPrefill, RefusesBadInput) {
  PagedCache cache;
  std::mt19937 rng(5);
  cache.build(rng, {64}, 64, 1, 64);
  DevBuf<uint16_t> d_q(64 * 64), d_out(64 * 64);
  DevBuf<int32_t> d_cu(2), d_lens(1);
  cuda::AttentionPrefillArgs a;
  a.q = reinterpret_cast<const cuda::bf16*>(d_q.ptr);
  a.out = reinterpret_cast<cuda::bf16*>(d_out.ptr);
  a.cu_seqlens_q = d_cu.ptr;
  a.seq_lens_k = d_lens.ptr;
  a.kv = cache.view();
  a.block_table = cache.table_view();
  a.batch = 1;
  a.total_q = a.max_seqlen_q = a.max_seqlen_k = 64;
  a.n_head = 1;
  EXPECT_TRUE(cuda::attention_prefill(nullptr, a).ok());
  auto bad = a;
  bad.kv.head_dim = 96;
  Status st = cuda::attention_prefill(nullptr, bad);
  EXPECT_NE(st.message().find("supported: 64, 128"), std::string::npos) << st.message();
  bad = a;
  bad.kv.dtype = DType::F16;
  EXPECT_NE(cuda::attention_prefill(nullptr, bad).message().find("supported: BF16"), std::string::npos);
  bad = a;
  bad.max_seqlen_k = 65;  // capacity is 1 block of 64
  const Status st_cap = cuda::attention_prefill(nullptr, bad);
  EXPECT_NE(st_cap.message().find("KV capacity 64"), std::string::npos) << st_cap.message();
  cuda::AttentionOptions bad_opt;
  bad_opt.hopper_consumer_warpgroups = 4;  // head dim 64 supports 2 or 3
  const Status st_wg = cuda::attention_prefill(nullptr, a, bad_opt);
  EXPECT_NE(st_wg.message().find("supported: 0 = default, 2, 3"), std::string::npos) << st_wg.message();
  bad = a;
  bad.kv.kv_block_size = 48;
  EXPECT_FALSE(cuda::attention_prefill(nullptr, bad).ok());
  bad = a;
  bad.n_head = 3;
  bad.kv.n_kv_head = 2;
  EXPECT_FALSE(cuda::attention_prefill(nullptr, bad).ok());
  bad = a;
  bad.q = reinterpret_cast<const cuda::bf16*>(d_q.ptr) + 1;  // misaligned
  EXPECT_FALSE(cuda::attention_prefill(nullptr, bad).ok());
  ATT_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mk::attn_test
