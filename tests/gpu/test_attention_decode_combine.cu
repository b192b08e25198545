// The decode's tagged split combine (AttentionOptions::decode_tagged_combine 1: tagged partials read after the
// arrival; 2: also staged into shared memory with the arrival; 3: 1 with the non-last splits held until their
// partial has landed) against the counter combine (0), which merges in
// the same split order and so must give the same bits, and against the float64 reference: ragged lengths ending
// mid-tile with NaN in the pool rows past them, GQA 4/12/16, splits 1/3/33/16/chosen, cp.async and TMA tiles with
// and without the early contract, both ring sizes, a partial set too large to stage; and a split that publishes
// late (after its arrival, on a workspace holding the previous call's partials of another query), which the last
// arrival must wait for rather than take the stale words.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cuda/attention/attn_internal.h"
#include "test_attention_fixture.h"

namespace mk::attn_test {
namespace {

struct CombineCase {
  int tagged = 1;          // AttentionOptions::decode_tagged_combine of the run under test
  int splits = 0;          // AttentionOptions::decode_splits
  bool early_kv = false;   // AttentionOptions::decode_early_kv
  int tma = -1;            // AttentionOptions::decode_tma
  int ctas_per_sm = 0;     // AttentionOptions::decode_ctas_per_sm
  int extra_capacity = 0;  // spare positions per sequence
};

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// One decode call on `ws` (as it is), returning out and LSE (both poisoned before).
Result decode_once(const PagedCache& cache, DevBuf<uint16_t>& d_q, DevBuf<int32_t>& d_lens, DevBuf<float>& ws,
                   int batch, int n_head, int max_k, const cuda::AttentionOptions& opt) {
  DevBuf<uint16_t> d_out(d_q.n);
  DevBuf<float> d_lse(size_t(batch) * n_head);
  d_out.poison();
  d_lse.poison();
  cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, ws, batch, n_head, max_k);
  a.lse = d_lse.ptr;
  const Status st = cuda::attention_decode(nullptr, a, opt);
  EXPECT_TRUE(st.ok()) << st.message();
  ATT_CUDA_CHECK(cudaDeviceSynchronize());
  return {d_out.download(), d_lse.download()};
}

bool same_bits(const Result& a, const Result& b) {
  return a.out == b.out && a.lse.size() == b.lse.size() &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
}

// The first result against the float64 reference (FA-3's rule: at most twice a naive bf16 run's error) and the LSE.
void check_reference(const Result& r, const PagedCache& cache, const std::vector<int>& kv_lens,
                     const std::vector<float>& q, int n_head, int d) {
  const int batch = int(kv_lens.size());
  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b;
  const float scale = 1.f / std::sqrt(float(d));
  std::vector<double> ref(q.size()), naive(q.size()), ref_lse(size_t(batch) * n_head);
  cpu::attention_prefill(ref.data(), ref_lse.data(), q.data(), cu.data(), kv_lens.data(), cache.host(), batch, n_head,
                         scale, true);
  cpu::attention_prefill(naive.data(), nullptr, q.data(), cu.data(), kv_lens.data(), cache.host(), batch, n_head,
                         scale, true, cpu::RefPrecision::NAIVE_BF16);
  bool finite = false;
  EXPECT_LE(rel_err_bf16(r.out, ref, &finite), 2.0 * rel_err_d(naive, ref) + 1e-4);
  EXPECT_TRUE(finite) << "NaN/Inf in output";
  double lse_err = 0;
  for (size_t i = 0; i < r.lse.size(); ++i)
    lse_err = std::isfinite(r.lse[i]) ? std::max(lse_err, double(std::abs(r.lse[i] - ref_lse[i]))) : 1e30;
  EXPECT_LE(lse_err, 2e-3) << "LSE";
}

// The counter combine on one poisoned workspace, the tagged one twice on another (the second call's tags differ
// from the first's): all three bit-identical, the first checked against the reference.
void run_combine(const std::vector<int>& kv_lens, int n_head, int n_kv, int d, int bs, const CombineCase& c,
                 uint32_t seed) {
  SCOPED_TRACE(cat("tagged=", c.tagged, " D=", d, " H=", n_head, "/", n_kv, " bs=", bs, " splits=", c.splits,
                   " batch=", kv_lens.size(), " first len=", kv_lens[0], " early_kv=", c.early_kv, " tma=", c.tma,
                   " ctas_per_sm=", c.ctas_per_sm));
  std::mt19937 rng(seed);
  const int batch = int(kv_lens.size());
  PagedCache cache;
  cache.build(rng, kv_lens, bs, n_kv, d, c.extra_capacity);
  poison_past_lengths(cache, kv_lens);
  const int max_k = *std::max_element(kv_lens.begin(), kv_lens.end());
  std::vector<uint16_t> q_bits;
  std::vector<float> q;
  random_bf16(rng, size_t(batch) * n_head * d, 2.f, q_bits, q);
  DevBuf<uint16_t> d_q;
  DevBuf<int32_t> d_lens;
  d_q.upload(q_bits);
  d_lens.upload(std::vector<int32_t>(kv_lens.begin(), kv_lens.end()));
  cuda::AttentionOptions opt;
  opt.decode_splits = c.splits;
  opt.decode_early_kv = c.early_kv;
  opt.decode_tma = c.tma;
  opt.decode_ctas_per_sm = c.ctas_per_sm;
  const size_t ws_bytes = cuda::attention_decode_workspace_bytes(batch, n_head, n_kv, d, max_k, opt);
  DevBuf<float> ws0(ws_bytes / 4 + 4), ws1(ws_bytes / 4 + 4);
  ws0.poison();
  ws1.poison();
  const Result counter = decode_once(cache, d_q, d_lens, ws0, batch, n_head, max_k, opt);
  opt.decode_tagged_combine = c.tagged;
  const Result t1 = decode_once(cache, d_q, d_lens, ws1, batch, n_head, max_k, opt);
  const Result t2 = decode_once(cache, d_q, d_lens, ws1, batch, n_head, max_k, opt);
  EXPECT_TRUE(same_bits(t1, counter)) << "tagged combine differs from the counter combine";
  EXPECT_TRUE(same_bits(t2, counter)) << "second tagged call differs";
  check_reference(t1, cache, kv_lens, q, n_head, d);
}

TEST(AttentionDecode, TaggedCombine) {
  uint32_t seed = 2100;
  for (int tagged : {1, 2, 3}) {
    // cp.async without the contract, TMA tiles under it (its default), cp.async under it.
    for (const auto& [early, tma] : {std::pair{false, 0}, std::pair{true, -1}, std::pair{true, 0}}) {
      CombineCase c;
      c.tagged = tagged;
      c.early_kv = early;
      c.tma = tma;
      for (int ratio : {4, 12}) run_combine({1, 2, 17, 31, 33, 64, 65, 129, 700}, 2 * ratio, 2, 64, 64, c, seed++);
      for (int splits : {1, 3, 33}) {
        c.splits = splits;
        run_combine({1000, 5, 129, 64 * 9 - 1}, 8, 2, 64, 128, c, seed++);
      }
      c.splits = 0;
      c.extra_capacity = 4096;
      run_combine({20000, 3}, 32, 8, 64, 64, c, seed++);
    }
    CombineCase c;
    c.tagged = tagged;
    run_combine({20000, 3}, 32, 8, 128, 64, c, seed++);  // head dim 128, chosen splits
    c.splits = 16;  // 16 heads per kv head at head dim 128 x 16 splits: too large to stage (2 falls back to 1)
    run_combine({3000}, 32, 2, 128, 64, c, seed++);
    c.splits = 3;  // the 96 KB ring (2 CTAs per SM): less room to stage
    c.ctas_per_sm = 2;
    run_combine({1000, 65}, 24, 2, 64, 64, c, seed++);
  }
}

// Sets the late-publish hook of the tagged combine for one scope.
struct LatePublish {
  explicit LatePublish(int ns) { cuda::attn::decode_test_late_publish(ns); }
  ~LatePublish() { cuda::attn::decode_test_late_publish(0); }
};

// Split 0 of every (sequence, kv head) stores its partial 20 us after its arrival. The workspace holds the
// previous call's partials (another query) in the same slots, so a combine that took a word without this call's
// tag would mix the two queries: the result must equal the counter combine of the new query, bit for bit.
TEST(AttentionDecode, TaggedCombineWaitsForLatePartials) {
  for (int tagged : {1, 2, 3})
    for (int d : {64, 128}) {
      SCOPED_TRACE(cat("tagged=", tagged, " D=", d));
      std::mt19937 rng(2300 + d + tagged);
      const std::vector<int> lens = {2000, 777};
      const int n_head = 8, n_kv = 2, batch = 2;
      PagedCache cache;
      cache.build(rng, lens, 64, n_kv, d);
      std::vector<uint16_t> q1_bits, q2_bits;
      std::vector<float> q1, q2;
      random_bf16(rng, size_t(batch) * n_head * d, 2.f, q1_bits, q1);
      random_bf16(rng, size_t(batch) * n_head * d, 2.f, q2_bits, q2);
      DevBuf<uint16_t> d_q1, d_q2;
      DevBuf<int32_t> d_lens;
      d_q1.upload(q1_bits);
      d_q2.upload(q2_bits);
      d_lens.upload(lens);
      cuda::AttentionOptions opt;
      opt.decode_splits = 7;
      const size_t ws_bytes = cuda::attention_decode_workspace_bytes(batch, n_head, n_kv, d, 2000, opt);
      DevBuf<float> ws0(ws_bytes / 4 + 4), ws1(ws_bytes / 4 + 4);
      ws0.poison();
      ws1.poison();
      const Result counter = decode_once(cache, d_q2, d_lens, ws0, batch, n_head, 2000, opt);
      opt.decode_tagged_combine = tagged;
      (void)decode_once(cache, d_q1, d_lens, ws1, batch, n_head, 2000, opt);  // leaves q1's partials in ws1
      LatePublish late(20000);
      const Result r = decode_once(cache, d_q2, d_lens, ws1, batch, n_head, 2000, opt);
      EXPECT_TRUE(same_bits(r, counter)) << "a stale partial was combined";
      check_reference(r, cache, lens, q2, n_head, d);
    }
}

TEST(AttentionSanitize, DecodeTagged) {
  uint32_t seed = 2400;
  for (int tagged : {1, 2, 3}) {
    CombineCase c;  // cp.async tiles, 3 splits, live rows g + 8
    c.tagged = tagged;
    c.splits = 3;
    run_combine({300, 17}, 24, 2, 64, 64, c, seed++);
    c.early_kv = true;  // TMA tiles under the early contract, 2 splits
    c.tma = 1;
    c.splits = 2;
    run_combine({3000, 33}, 8, 2, 64, 64, c, seed++);
    c.tma = -1;
    c.splits = 16;  // head dim 128, 16 heads per kv head: staging does not fit
    run_combine({2000}, 32, 2, 128, 64, c, seed++);
  }
  LatePublish late(2000);
  CombineCase c;
  c.tagged = 2;
  c.splits = 4;
  run_combine({900, 200}, 8, 2, 64, 64, c, seed++);
}

}  // namespace
}  // namespace mk::attn_test
