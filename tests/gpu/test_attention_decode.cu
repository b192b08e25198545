// Split-KV decode and kv_append vs the CPU reference: decode is the q_len = 1 case of cpu::attention_prefill
// (FA-3's rule against a naive bf16 run); kv_append must place rows bit-exactly where the block table says.
// Batch 1..64, ragged contexts (1, 63, 64, 65, ..., 20000, 128k), GQA 1/4/6/8/12/16/24/40, head dims 64/128,
// forced split counts and split boundaries, capacity far above the lengths, repeated calls on one workspace,
// decode right after kv_append in one stream (PDL).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/attention/attn_internal.h"
#include "test_attention_fixture.h"

namespace mk::attn_test {
namespace {

struct DecodeCase {
  int splits = 0;         // AttentionOptions::decode_splits (0 = the dispatcher's choice)
  int max_seqlen_k = 0;   // 0 = the longest length (the layered backend passes its whole KV capacity)
  bool pdl = true;
  int extra_capacity = 0;  // spare positions per sequence (capacity above the lengths)
  int warps = 0;           // AttentionOptions::decode_warps
  int ctas_per_sm = 0;     // AttentionOptions::decode_ctas_per_sm
  bool early_kv = false;   // AttentionOptions::decode_early_kv
  int l2_prefetch_tiles = 2;  // AttentionOptions::decode_l2_prefetch_tiles
  bool cluster = false;    // AttentionOptions::decode_cluster_combine
  int early_stages = 0;    // AttentionOptions::decode_early_stages
  int tma = -1;            // AttentionOptions::decode_tma
  bool nan_past_len = false;  // the device pool's rows past each length (within its blocks) hold NaN
};

cuda::AttentionOptions decode_options(const DecodeCase& c) {
  cuda::AttentionOptions opt;
  opt.decode_splits = c.splits;
  opt.decode_pdl = c.pdl;
  opt.decode_warps = c.warps;
  opt.decode_ctas_per_sm = c.ctas_per_sm;
  opt.decode_early_kv = c.early_kv;
  opt.decode_l2_prefetch_tiles = c.l2_prefetch_tiles;
  opt.decode_cluster_combine = c.cluster;
  opt.decode_early_stages = c.early_stages;
  opt.decode_tma = c.tma;
  return opt;
}

// Writes NaN bits into the device K and V rows of every position past a sequence's length up to the end of its
// blocks (the host copy, which the reference reads only below the lengths, keeps its values): a kernel that
// loads whole tiles past the end must keep those rows out of the result (0 * NaN is NaN).
void poison_past_lengths(PagedCache& cache, const std::vector<int>& kv_lens) {
  const size_t row = size_t(cache.n_kv_head) * cache.head_dim;
  const std::vector<uint16_t> nan_row(row, 0x7fc0);
  for (size_t b = 0; b < kv_lens.size(); ++b)
    for (int pos = kv_lens[b]; pos < cache.max_blocks_per_seq * cache.block_size; ++pos) {
      const int blk = cache.table[b * cache.max_blocks_per_seq + pos / cache.block_size];
      if (blk < 0) break;
      const size_t off = (size_t(blk) * cache.block_size + pos % cache.block_size) * row;
      ATT_CUDA_CHECK(cudaMemcpy(cache.d_k.ptr + off, nan_row.data(), row * 2, cudaMemcpyHostToDevice));
      ATT_CUDA_CHECK(cudaMemcpy(cache.d_v.ptr + off, nan_row.data(), row * 2, cudaMemcpyHostToDevice));
    }
}

// Runs the decode twice on the same workspace (poisoned before the first call: the split counters must cope
// with any initial contents and leave themselves reset), checks the first result against the float64
// reference with FA-3's rule and the second for bit-equality (the combine order is fixed, so it must be).
void run_decode(const std::vector<int>& kv_lens, int n_head, int n_kv_head, int d, int bs, const DecodeCase& c,
                uint32_t seed) {
  SCOPED_TRACE(cat("decode D=", d, " H=", n_head, "/", n_kv_head, " bs=", bs, " splits=", c.splits, " batch=",
                   kv_lens.size(), " first len=", kv_lens[0], " max_seqlen_k=", c.max_seqlen_k, " pdl=", c.pdl, " warps=", c.warps,
                   " ctas_per_sm=", c.ctas_per_sm, " early_kv=", c.early_kv,
                   " l2_prefetch_tiles=", c.l2_prefetch_tiles, " cluster=", c.cluster, " early_stages=", c.early_stages,
                   " tma=", c.tma, " nan_past_len=", c.nan_past_len));
  std::mt19937 rng(seed);
  const int batch = int(kv_lens.size());
  PagedCache cache;
  cache.build(rng, kv_lens, bs, n_kv_head, d, c.extra_capacity);
  if (c.nan_past_len) poison_past_lengths(cache, kv_lens);
  int max_k = 0;
  for (int l : kv_lens) max_k = std::max(max_k, l);
  if (c.max_seqlen_k > 0) max_k = c.max_seqlen_k;
  std::vector<uint16_t> q_bits;
  std::vector<float> q;
  random_bf16(rng, size_t(batch) * n_head * d, 2.f, q_bits, q);
  DevBuf<uint16_t> d_q, d_out(q_bits.size());
  DevBuf<float> d_lse(size_t(batch) * n_head);
  DevBuf<int32_t> d_lens;
  d_q.upload(q_bits);
  d_lens.upload(std::vector<int32_t>(kv_lens.begin(), kv_lens.end()));
  const cuda::AttentionOptions opt = decode_options(c);
  const size_t ws = cuda::attention_decode_workspace_bytes(batch, n_head, n_kv_head, d, max_k, opt);
  DevBuf<float> d_ws(ws / sizeof(float) + 4);
  d_out.poison();
  d_lse.poison();
  d_ws.poison();
  cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, d_ws, batch, n_head, max_k);
  a.lse = d_lse.ptr;
  Status st = cuda::attention_decode(nullptr, a, opt);
  ASSERT_TRUE(st.ok()) << st.message();
  ATT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out1 = d_out.download();
  const std::vector<float> lse = d_lse.download();
  d_out.poison();
  d_lse.poison();
  const Status st2 = cuda::attention_decode(nullptr, a, opt);
  ASSERT_TRUE(st2.ok()) << st2.message();
  ATT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_out.download() == out1) << "second call on the same workspace differs";
  const std::vector<float> lse2 = d_lse.download();
  EXPECT_EQ(0, std::memcmp(lse.data(), lse2.data(), lse.size() * sizeof(float))) << "second call: LSE differs";

  std::vector<int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b;
  const float scale = 1.f / std::sqrt(float(d));
  std::vector<double> ref(q.size()), naive(q.size()), ref_lse(size_t(batch) * n_head);
  cpu::attention_prefill(ref.data(), ref_lse.data(), q.data(), cu.data(), kv_lens.data(), cache.host(), batch, n_head,
                         scale, true);
  cpu::attention_prefill(naive.data(), nullptr, q.data(), cu.data(), kv_lens.data(), cache.host(), batch, n_head,
                         scale, true, cpu::RefPrecision::NAIVE_BF16);
  bool finite = false;
  const double err = rel_err_bf16(out1, ref, &finite);
  const double err_naive = rel_err_d(naive, ref);
  EXPECT_TRUE(finite) << "NaN/Inf in output";
  EXPECT_LE(err, 2.0 * err_naive + 1e-4) << "naive bf16 error " << err_naive;
  double lse_err = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    const double e = std::abs(lse[i] - ref_lse[i]);
    lse_err = std::isfinite(lse[i]) ? std::max(lse_err, e) : 1e30;
  }
  EXPECT_LE(lse_err, 2e-3) << "LSE";
}

void run_decode(const std::vector<int>& kv_lens, int n_head, int n_kv_head, int d, int bs, int splits, uint32_t seed,
                int warps = 0) {
  DecodeCase c;
  c.splits = splits;
  c.warps = warps;
  run_decode(kv_lens, n_head, n_kv_head, d, bs, c, seed);
}

TEST(AttentionDecode, MatchesReference) {
  uint32_t seed = 11;
  for (int d : {64, 128}) {
    // GQA 12 and 24: more than 8 heads per CTA (live mma rows g + 8) with padding rows; 40: chunks of 16 heads.
    for (int ratio : {1, 4, 6, 8, 12, 16, 24, 40}) run_decode({1, 63, 64, 65, 700}, 2 * ratio, 2, d, 64, 0, seed++);
    for (int splits : {1, 3, 7, 64}) run_decode({1000, 5, 129}, 8, 2, d, 128, splits, seed++);
    run_decode({20000}, 32, 8, d, 64, 0, seed++);
  }
}

// The 8-warp build (half-size tiles): GQA with and without live rows g + 8, splits, ragged lengths.
TEST(AttentionDecode, EightWarps) {
  uint32_t seed = 300;
  for (int d : {64, 128}) {
    for (int ratio : {1, 4, 12}) run_decode({1, 63, 64, 65, 700}, 2 * ratio, 2, d, 64, 0, seed++, 8);
    for (int splits : {1, 5, 33}) run_decode({64 * 9 - 1, 5, 129, 3000}, 8, 2, d, 128, splits, seed++, 8);
  }
}

// The 96 KB build (2 CTAs per SM, half-size tiles) and the early K/V contract (tiles below the newest row
// issued before the PDL wait; the newest row's tile after it): lengths whose newest row falls in a warp's
// first, second or a later tile, 1-key contexts, GQA with live rows g + 8, forced and chosen splits.
TEST(AttentionDecode, TwoCtasPerSmAndEarlyKv) {
  uint32_t seed = 500;
  for (int d : {64, 128})
    for (const auto& [cps, early] : {std::pair{2, false}, std::pair{0, true}, std::pair{2, true}}) {
      DecodeCase c;
      c.ctas_per_sm = cps;
      c.early_kv = early;
      for (int ratio : {4, 12}) run_decode({1, 2, 15, 16, 17, 63, 64, 65, 700}, 2 * ratio, 2, d, 64, c, seed++);
      for (int splits : {1, 3, 33}) {
        c.splits = splits;
        run_decode({1000, 5, 129, 64 * 9 - 1}, 8, 2, d, 128, c, seed++);
      }
      c.splits = 0;
      run_decode({20000}, 32, 8, d, 64, c, seed++);
    }
}

// The L2 prefetch before the PDL wait only chooses cache lines: off, one tile, and more tiles than a warp has
// (capacity far above the lengths, so most of the block table past the lengths is never addressed).
TEST(AttentionDecode, L2PrefetchDepths) {
  uint32_t seed = 700;
  for (int d : {64, 128})
    for (int tiles : {0, 1, 64}) {
      DecodeCase c;
      c.l2_prefetch_tiles = tiles;
      c.extra_capacity = 4096;
      run_decode({1, 65, 700, 3000}, 8, 2, d, 64, c, seed++);
      c.ctas_per_sm = 2;
      run_decode({129, 2000}, 24, 2, d, 128, c, seed++);
    }
}

// Ring stages issued before the PDL wait under the early contract: 1, 2, 3 (the whole ring; the loop then skips
// its first issue) and the default (3 at head dim 64, 2 at 128); lengths whose newest row falls in a warp's
// first, second, third or a later tile (the prefix stops there), 1-key contexts, GQA with live rows g + 8,
// forced and chosen splits, capacity far above the lengths.
TEST(AttentionDecode, EarlyRingStages) {
  uint32_t seed = 1300;
  for (int d : {64, 128})
    for (int stages : {3, 1, 0, 2}) {
      DecodeCase c;
      c.early_kv = true;
      c.early_stages = stages;
      for (int ratio : {4, 12}) run_decode({1, 2, 17, 64, 65, 129, 193, 257, 700}, 2 * ratio, 2, d, 64, c, seed++);
      for (int splits : {1, 3, 33}) {
        c.splits = splits;
        run_decode({1000, 5, 129, 64 * 9 - 1}, 8, 2, d, 128, c, seed++);
      }
      c.splits = 0;
      c.extra_capacity = 4096;
      run_decode({20000, 3}, 32, 8, d, 64, c, seed++);
    }
}

// K/V tile loads (decode_tma 0: cp.async, 1: TMA 64 keys x 3 stages, 2: TMA 32 keys x 6 stages), with and
// without the early contract (its default and 1 stage before the wait): lengths ending in a warp's first, second
// or a later tile and mid-tile (31, 33, 65: the box reads rows past the end, NaN here), 1-key contexts, GQA with
// live rows g + 8, forced and chosen splits, block sizes 64 and 128, capacity far above the lengths; head dim 128
// ignores the switch (cp.async) and must still be right.
TEST(AttentionDecode, TmaLoads) {
  uint32_t seed = 1700;
  for (int tma : {0, 1, 2})
    for (const auto& [early, stages] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{true, 1}}) {
      DecodeCase c;
      c.tma = tma;
      c.early_kv = early;
      c.early_stages = stages;
      c.nan_past_len = true;
      for (int ratio : {4, 12}) run_decode({1, 2, 17, 31, 32, 33, 64, 65, 129, 193, 700}, 2 * ratio, 2, 64, 64, c, seed++);
      for (int splits : {1, 3, 33}) {
        c.splits = splits;
        run_decode({1000, 5, 129, 64 * 9 - 1}, 8, 2, 64, 128, c, seed++);
      }
      c.splits = 0;
      c.extra_capacity = 4096;
      run_decode({20000, 3}, 32, 8, 64, 64, c, seed++);
      if (tma == 1) run_decode({20000, 3}, 32, 8, 128, 64, c, seed++);
    }
}

// One workspace (poisoned once) through calls whose partials are laid out differently (split counts; a shorter
// context uses fewer of them), as the layered backend's per-length graphs do: the arrival counters must cope
// with every change. Every call is checked against the reference.
TEST(AttentionDecode, WorkspaceAcrossLayouts) {
  for (int d : {64, 128}) {
    std::mt19937 rng(600 + d);
    const int n_head = 24, n_kv = 2, bs = 64;
    const std::vector<int> lens = {3000, 700};
    PagedCache cache;
    cache.build(rng, lens, bs, n_kv, d);
    std::vector<uint16_t> q_bits;
    std::vector<float> q;
    random_bf16(rng, size_t(2) * n_head * d, 2.f, q_bits, q);
    DevBuf<uint16_t> d_q, d_out(q_bits.size());
    DevBuf<int32_t> d_lens;
    d_q.upload(q_bits);
    d_lens.upload(lens);
    DecodeCase big;
    big.splits = 47;
    DevBuf<float> d_ws(cuda::attention_decode_workspace_bytes(2, n_head, n_kv, d, 3000, decode_options(big)) / 4 + 4);
    d_ws.poison();
    const std::vector<int32_t> cu = {0, 1, 2};
    std::vector<double> ref(q.size()), naive(q.size());
    const float scale = 1.f / std::sqrt(float(d));
    cpu::attention_prefill(ref.data(), nullptr, q.data(), cu.data(), lens.data(), cache.host(), 2, n_head, scale, true);
    cpu::attention_prefill(naive.data(), nullptr, q.data(), cu.data(), lens.data(), cache.host(), 2, n_head, scale,
                           true, cpu::RefPrecision::NAIVE_BF16);
    const double tol = 2.0 * rel_err_d(naive, ref) + 1e-4;
    for (int splits : {3, 5, 47, 3, 2, 47}) {
      SCOPED_TRACE(cat("D=", d, " splits=", splits));
      DecodeCase c;
      c.splits = splits;
      d_out.poison();
      const cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, d_ws, 2, n_head, 3000);
      ASSERT_TRUE(cuda::attention_decode(nullptr, a, decode_options(c)).ok());
      ATT_CUDA_CHECK(cudaDeviceSynchronize());
      bool finite = false;
      EXPECT_LE(rel_err_bf16(d_out.download(), ref, &finite), tol);
      EXPECT_TRUE(finite);
    }
  }
}

// Split boundaries fall on 64-key units: lengths at, just under and just over unit and tile multiples, split
// counts that divide them unevenly, more splits than units, and a split per unit.
TEST(AttentionDecode, SplitBoundaries) {
  uint32_t seed = 100;
  for (int d : {64, 128})
    for (int splits : {2, 5, 9, 33, 1024}) run_decode({64 * 9, 64 * 9 - 1, 64 * 9 + 1, 32 * 7, 96}, 8, 2, d, 192, splits, seed++);
}

// The layered backend passes its whole KV capacity as max_seqlen_k: many splits are chosen for it while the
// actual contexts are short (most CTAs find no keys); also without PDL.
TEST(AttentionDecode, CapacityAboveLengths) {
  for (int d : {64, 128}) {
    DecodeCase c;
    c.max_seqlen_k = 8192;
    c.extra_capacity = 8192;
    run_decode({1, 5, 300}, 32, 8, d, 64, c, 7 + d);
    c.pdl = false;
    run_decode({77, 4000}, 16, 2, d, 128, c, 9 + d);
  }
}

TEST(AttentionSanitize, DecodeSmall) {
  for (int d : {64, 128}) {
    run_decode({1, 300}, 8, 2, d, 64, 3, 31);
    run_decode({200, 1}, 24, 2, d, 64, 2, 32);  // 12 heads per kv head: rows g + 8 live, split combine
    run_decode({200, 33}, 8, 2, d, 64, 2, 33, 8);  // 8 warps
    DecodeCase c;  // 2 CTAs per SM, early K/V
    c.splits = 2;
    c.ctas_per_sm = 2;
    c.early_kv = true;
    run_decode({200, 17}, 24, 2, d, 64, c, 34);
    DecodeCase e;  // early contract, the whole ring before the wait
    e.splits = 2;
    e.early_kv = true;
    e.early_stages = 3;
    run_decode({3000, 17}, 8, 2, d, 64, e, 35);
  }
}

// The cluster split combine (partials in shared memory, combined through DSMEM after a cluster barrier):
// split counts 2 .. 16 with splits past the keys (short contexts: empty partials, or a single used split that
// writes alone), GQA with live rows g + 8, both ring sizes, with and without the early K/V contract, many
// clusters in several waves (batch 64 x 3 splits). The device must hold the clusters (else the launch would
// silently fall back to the counter combine and this test would not test it).
TEST(AttentionSanitize, DecodeTma) {
  for (int tma : {1, 2}) {
    DecodeCase c;  // TMA tiles, NaN past the lengths, split combine, live rows g + 8
    c.tma = tma;
    c.splits = 2;
    c.nan_past_len = true;
    run_decode({300, 17}, 24, 2, 64, 64, c, 36);
    c.early_kv = true;  // the early contract: the whole ring before the wait
    run_decode({3000, 33}, 8, 2, 64, 64, c, 37);
  }
}

TEST(AttentionDecode, ClusterCombine) {
  uint32_t seed = 900;
  for (int d : {64, 128}) {
    for (int cps : {1, 2}) {
      const int cap16 = cuda::attn::decode_cluster_capacity(d, 16, cps, false);
      const int cap3 = cuda::attn::decode_cluster_capacity(d, 3, cps, true);
      ASSERT_GT(cap16, 0) << "D=" << d << " ctas_per_sm=" << cps << ": no 16-CTA cluster fits";
      ASSERT_GT(cap3, 0);
      std::printf("D=%d ctas_per_sm=%d: 16-CTA clusters held %d, 3-CTA %d\n", d, cps, cap16, cap3);
    }
    for (const auto& [cps, early] : {std::pair{0, false}, std::pair{0, true}, std::pair{2, true}}) {
      DecodeCase c;
      c.cluster = true;
      c.ctas_per_sm = cps;
      c.early_kv = early;
      for (int splits : {2, 3, 5, 16}) {
        c.splits = splits;
        for (int ratio : {4, 12}) run_decode({1, 63, 65, 700, 64 * 9 + 1}, 2 * ratio, 2, d, 64, c, seed++);
      }
      c.splits = 0;
      run_decode({20000}, 32, 8, d, 64, c, seed++);
      run_decode({1, 5, 300}, 32, 8, d, 64, c, seed++);
    }
    std::vector<int> lens(64);
    std::mt19937 rng(seed);
    for (int& l : lens) l = 1 + int(rng() % 3000);
    DecodeCase c;
    c.cluster = true;
    c.splits = 3;
    run_decode(lens, 32, 8, d, 64, c, seed++);
  }
}

TEST(AttentionSanitize, DecodeCluster) {
  for (int d : {64, 128}) {
    DecodeCase c;
    c.cluster = true;
    c.splits = 3;
    run_decode({200, 1}, 24, 2, d, 64, c, 35);  // 12 heads per kv head; the second sequence uses one split
    c.early_kv = true;
    c.ctas_per_sm = 2;
    run_decode({130, 17}, 8, 2, d, 64, c, 36);
  }
}

TEST(AttentionDecode, Batch64) {
  std::vector<int> lens(64);
  std::mt19937 rng(3);
  for (int& l : lens) l = 1 + int(rng() % 300);
  run_decode(lens, 32, 8, 64, 64, 0, 21);
  run_decode(lens, 16, 8, 128, 128, 0, 22);
  for (int& l : lens) l = 1 + int(rng() % 3000);
  run_decode(lens, 32, 8, 128, 64, 0, 23);
  run_decode(lens, 32, 8, 64, 64, 3, 24);  // forced splits: 64 x 8 counters in flight at once
}

// Context 128k (the largest supported by the issue), default splits, both head dims.
TEST(AttentionDecode, Context128k) {
  run_decode({131072}, 8, 1, 128, 256, 0, 41);
  run_decode({131072 - 17}, 4, 1, 64, 64, 0, 42);
}

// The kernel launched with PDL right after kv_append must see the row kv_append wrote (griddepcontrol.wait
// before its first read): the cache holds a wrong last row until the append.
void decode_after_append(const cuda::AttentionOptions& opt, int d = 128) {
  SCOPED_TRACE(cat("early_kv=", opt.decode_early_kv, " ctas_per_sm=", opt.decode_ctas_per_sm, " cluster=",
                   opt.decode_cluster_combine, " early_stages=", opt.decode_early_stages, " tma=", opt.decode_tma,
                   " d=", d));
  std::mt19937 rng(77);
  const int n_kv = 2, n_head = 8, bs = 64, len = 1000;
  PagedCache cache;
  cache.build(rng, {len}, bs, n_kv, d);
  std::vector<uint16_t> kn_bits, vn_bits, q_bits;
  std::vector<float> kn, vn, q;
  random_bf16(rng, size_t(n_kv) * d, 1.f, kn_bits, kn);
  random_bf16(rng, size_t(n_kv) * d, 1.f, vn_bits, vn);
  random_bf16(rng, size_t(n_head) * d, 2.f, q_bits, q);
  // The host copy gets the appended row; the device copy still holds the old one.
  const size_t row = (size_t(cache.table[(len - 1) / bs]) * bs + (len - 1) % bs) * n_kv * d;
  for (int i = 0; i < n_kv * d; ++i) {
    cache.k[row + i] = kn[i];
    cache.v[row + i] = vn[i];
  }
  DevBuf<uint16_t> d_kn, d_vn, d_q, d_out(q_bits.size());
  d_kn.upload(kn_bits);
  d_vn.upload(vn_bits);
  d_q.upload(q_bits);
  DevBuf<int32_t> d_seq, d_pos, d_lens;
  d_seq.upload({0});
  d_pos.upload({len - 1});
  d_lens.upload({len});
  const size_t ws = cuda::attention_decode_workspace_bytes(1, n_head, n_kv, d, len, opt);
  DevBuf<float> d_ws(ws / 4 + 4);
  d_out.poison();
  cudaStream_t s;
  ATT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ASSERT_TRUE(cuda::kv_append(s, cache.view(), cache.table_view(), reinterpret_cast<const cuda::bf16*>(d_kn.ptr),
                              reinterpret_cast<const cuda::bf16*>(d_vn.ptr), n_kv * d, d_seq.ptr, d_pos.ptr, 1, len)
                  .ok());
  const cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, d_ws, 1, n_head, len);
  ASSERT_TRUE(cuda::attention_decode(s, a, opt).ok());
  ATT_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  const std::vector<int32_t> cu = {0, 1}, lens = {len};
  std::vector<double> ref(q.size()), naive(q.size());
  cpu::attention_prefill(ref.data(), nullptr, q.data(), cu.data(), lens.data(), cache.host(), 1, n_head,
                         1.f / std::sqrt(float(d)), true);
  cpu::attention_prefill(naive.data(), nullptr, q.data(), cu.data(), lens.data(), cache.host(), 1, n_head,
                         1.f / std::sqrt(float(d)), true, cpu::RefPrecision::NAIVE_BF16);
  bool finite = false;
  const double err = rel_err_bf16(d_out.download(), ref, &finite);
  EXPECT_TRUE(finite);
  EXPECT_LE(err, 2.0 * rel_err_d(naive, ref) + 1e-4);
}

// The early K/V contract allows the previous kernel to write the newest row: that row must still be seen.
TEST(AttentionDecode, AfterAppendInStream) {
  decode_after_append({});
  cuda::AttentionOptions early;
  early.decode_early_kv = true;
  decode_after_append(early);
  early.decode_ctas_per_sm = 2;
  decode_after_append(early);
  early.decode_cluster_combine = true;
  decode_after_append(early);
  cuda::AttentionOptions cl;
  cl.decode_cluster_combine = true;
  decode_after_append(cl);
  cuda::AttentionOptions ring;  // the whole ring before the wait (head dim 128: not the default there)
  ring.decode_early_kv = true;
  ring.decode_early_stages = 3;
  decode_after_append(ring);
  for (int tma : {0, 1, 2}) {  // head dim 64: TMA tiles (or not) with the early contract's default
    cuda::AttentionOptions t;
    t.decode_early_kv = true;
    t.decode_tma = tma;
    decode_after_append(t, 64);
  }
}

TEST(AttentionDecode, RefusesBadInput) {
  PagedCache cache;
  std::mt19937 rng(5);
  cache.build(rng, {100}, 64, 2, 128);
  DevBuf<uint16_t> d_q(8 * 128), d_out(8 * 128);
  DevBuf<int32_t> d_lens(1);
  DevBuf<float> d_ws(1 << 16);
  cuda::AttentionDecodeArgs a = decode_args(cache, d_q, d_out, d_lens, d_ws, 1, 8, 129);  // capacity 2 x 64 = 128
  Status st = cuda::attention_decode(nullptr, a);
  EXPECT_NE(st.message().find("KV capacity 128"), std::string::npos) << st.message();
  a.max_seqlen_k = 100;
  a.workspace_bytes = 16;
  const Status st_ws = cuda::attention_decode(nullptr, a);
  EXPECT_NE(st_ws.message().find("workspace"), std::string::npos) << st_ws.message();
  a.kv.head_dim = 256;
  EXPECT_NE(cuda::attention_decode(nullptr, a).message().find("supported: 64, 128"), std::string::npos);
  a.kv.head_dim = 128;
  a.workspace_bytes = d_ws.n * sizeof(float);
  cuda::AttentionOptions bad;
  bad.decode_ctas_per_sm = 3;
  EXPECT_NE(cuda::attention_decode(nullptr, a, bad).message().find("decode_ctas_per_sm 3"), std::string::npos);
  cuda::AttentionOptions bad_stages;
  bad_stages.decode_early_stages = 4;
  EXPECT_NE(cuda::attention_decode(nullptr, a, bad_stages).message().find("decode_early_stages 4"), std::string::npos);
  cuda::AttentionOptions bad_tma;
  bad_tma.decode_tma = 3;
  EXPECT_NE(cuda::attention_decode(nullptr, a, bad_tma).message().find("decode_tma 3"), std::string::npos);
}

TEST(AttentionKvAppend, PlacesRowsBitExact) {
  std::mt19937 rng(8);
  const int n_kv = 3, d = 64, bs = 64;
  PagedCache cache;
  cache.build(rng, {130, 5}, bs, n_kv, d, /*extra_capacity=*/70);
  // new tokens: seq 0 positions 130..139, seq 1 positions 5..69 (crosses a block boundary)
  std::vector<int32_t> seq, pos;
  for (int i = 0; i < 10; ++i) seq.push_back(0), pos.push_back(130 + i);
  for (int i = 0; i < 65; ++i) seq.push_back(1), pos.push_back(5 + i);
  const int n = int(seq.size());
  const int64_t stride = 3 * n_kv * d;  // K and V as slices of a fused [n, 3 * n_kv * d] buffer
  std::vector<uint16_t> fused_bits;
  std::vector<float> fused;
  random_bf16(rng, size_t(n) * stride, 1.f, fused_bits, fused);
  DevBuf<uint16_t> d_fused;
  d_fused.upload(fused_bits);
  DevBuf<int32_t> d_seq, d_pos;
  d_seq.upload(seq);
  d_pos.upload(pos);
  const cuda::bf16* base = reinterpret_cast<const cuda::bf16*>(d_fused.ptr);
  Status st = cuda::kv_append(nullptr, cache.view(), cache.table_view(), base + n_kv * d, base + 2 * n_kv * d, stride,
                              d_seq.ptr, d_pos.ptr, n, 140);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<uint16_t> k = cache.d_k.download(), v = cache.d_v.download();
  for (int t = 0; t < n; ++t) {
    const int blk = cache.table[seq[t] * cache.max_blocks_per_seq + pos[t] / bs];
    const size_t dst = (size_t(blk) * bs + pos[t] % bs) * n_kv * d;
    for (int i = 0; i < n_kv * d; ++i) {
      ASSERT_EQ(k[dst + i], fused_bits[t * stride + n_kv * d + i]) << "token " << t << " elem " << i;
      ASSERT_EQ(v[dst + i], fused_bits[t * stride + 2 * n_kv * d + i]) << "token " << t << " elem " << i;
    }
  }
  // Untouched rows keep their values.
  const size_t first_row = size_t(cache.table[0]) * bs * n_kv * d;
  for (int i = 0; i < n_kv * d; ++i) ASSERT_EQ(k[first_row + i], cache.k_bits[first_row + i]);
  // Positions past the capacity are an error, not a truncation.
  const int cap = cache.max_blocks_per_seq * bs;
  const Status st_cap = cuda::kv_append(nullptr, cache.view(), cache.table_view(), base, base, stride, d_seq.ptr,
                                        d_pos.ptr, n, cap + 1);
  EXPECT_NE(st_cap.message().find("KV capacity"), std::string::npos) << st_cap.message();
}

}  // namespace
}  // namespace mk::attn_test
