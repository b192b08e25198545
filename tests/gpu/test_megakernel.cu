// The megakernel (src/megakernel/device/) against the CPU reference and the layered CUDA backend: random small
// models of every family (Llama, Qwen2 biases, Qwen3 q/k norm, tied heads), GQA 1/4/6/8, head dims 64 and 128,
// hidden sizes not a power of two, inline and split attention, all SMs and few SMs. Teacher-forced so one near-tie
// cannot derail the rest; argmax must equal the CPU's unless the CPU's top two logits are within TIE. Greedy decode
// with K steps per launch must give the same tokens as one step per launch (bit-exact: same kernel, same order).
// Run: test_gpu --gtest_filter='Megakernel*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <tuple>

#include "cpu/cpu_backend.h"
#include "cuda/backend/cuda_backend.h"
#include "gpu_test_util.h"
#include "megakernel_fixture.h"
#include "megakernel/device/megakernel_backend.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::megakernel {
namespace {

constexpr double LOGITS_TOL = 3e-2;  // bf16 K/V cache vs the CPU's fp32 cache; fp32 elsewhere
constexpr double TIE = 2e-2;

// 3 layers of tests/megakernel's tiny_config (sizes not powers of two, every family's quirks).
ModelConfig cfg(Family f, int hd, int n_head, int n_kv, int n_embd, int n_ff, bool tied, int vocab = 509) {
  return test::tiny_config(f, n_head, n_kv, hd, n_embd, n_ff, /*n_layer=*/3, vocab, tied);
}

using gpu_test::rel_err;

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

bool near_tie(std::vector<float> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1] < TIE * std::max(1.f, std::fabs(v[0]));
}

// The CPU's greedy tokens after `prompt` equal `out` up to the first near-tie (out[i] is the token chosen after
// feeding the previous one; out[0] after feeding the prompt's argmax at position prompt.size()).
void expect_cpu_greedy_prefix(const Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  CpuBackend cpu(m, int(prompt.size() + out.size()) + 1);
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  ASSERT_TRUE(cpu.forward(prompt, 0, logits).ok());
  int32_t t = argmax(logits);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(cpu.forward(std::span(&t, 1), int(prompt.size() + i), logits).ok());
    if (near_tie(logits)) break;
    t = argmax(logits);
    ASSERT_EQ(out[i], t) << "token " << i;
  }
}

// The megakernel's greedy tokens after `prompt` (fed through forward): n tokens at spl steps per launch; empty (and a
// test failure) when it cannot run.
std::vector<int32_t> mk_greedy(const Model& m, const std::vector<int32_t>& prompt, MegakernelOptions opt, int n, int spl) {
  auto b = make_mk(m, 64, opt);
  if (!b) return {};
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  std::vector<int32_t> out(static_cast<size_t>(n));
  const Status fw = b->forward(prompt, 0, logits);
  const Status st = fw.ok() ? b->generate_greedy(argmax(logits), int(prompt.size()), out, spl) : fw;
  if (!st.ok()) {
    ADD_FAILURE() << st.message();
    return {};
  }
  return out;
}

struct Case {
  const char* name;
  ModelConfig c;
};
std::vector<Case> cases() {
  return {{"llama hd64 gqa4", cfg(Family::Llama, 64, 8, 2, 200, 344, false)},
          {"llama hd64 gqa1 tied", cfg(Family::Llama, 64, 4, 4, 136, 96, true)},
          {"qwen2 hd64 gqa6 bias", cfg(Family::Qwen2, 64, 6, 1, 72, 232, false)},
          {"qwen3 hd128 gqa8 qknorm tied", cfg(Family::Qwen3, 128, 8, 1, 120, 104, true)},
          {"qwen3 hd128 gqa4", cfg(Family::Qwen3, 128, 8, 2, 256, 512, false)}};
}

// Teacher-forced: 20 positions through the megakernel and the CPU; every step's logits and argmax compared.
void compare(const Case& k, MegakernelOptions opt, uint64_t seed) {
  SCOPED_TRACE(cat(k.name, ", n_sm ", opt.n_sm, ", chunk ", opt.attn_chunk_len, ", ring ", opt.weight_ring, ", dynamic ",
                   opt.attn_chunks_dynamic, ", flags ", opt.flag_publish, ", mid_resid ", opt.mid_resid));
  Model m = make_random_model(k.c, DType::BF16, seed);
  auto mk_b = make_mk(m, 64, opt);
  ASSERT_TRUE(mk_b);
  CpuBackend cpu(m, 64);
  const int V = k.c.n_vocab;
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  int32_t t = int32_t(seed % uint64_t(V));
  for (int pos = 0; pos < 20; ++pos) {
    const Status st = mk_b->forward(std::span(&t, 1), pos, a);
    ASSERT_TRUE(st.ok()) << "pos " << pos << ": " << st.message();
    ASSERT_TRUE(cpu.forward(std::span(&t, 1), pos, b).ok());
    EXPECT_LT(rel_err(a, b), LOGITS_TOL) << "pos " << pos;
    if (!near_tie(b)) EXPECT_EQ(argmax(a), argmax(b)) << "pos " << pos;
    t = argmax(b);
  }
}

TEST(Megakernel, MatchesCpuAllSmsInlineAttention) {
  uint64_t seed = 1;
  for (const Case& k : cases()) compare(k, {}, seed++);
}

TEST(Megakernel, MatchesCpuFlagPublish) {
  uint64_t seed = 31;
  for (const Case& k : cases()) {
    compare(k, {.flag_publish = 1, .mid_resid = true}, seed++);
    compare(k, {.n_sm = 7, .attn_chunk_len = 5, .flag_publish = 1, .mid_resid = false}, seed++);
    compare(k, {.flag_publish = 0, .mid_resid = false}, seed++);  // version 6's protocol
  }
}

TEST(Megakernel, MatchesCpuSplitAttentionFewSms) {
  uint64_t seed = 11;
  for (const Case& k : cases()) {
    compare(k, {.n_sm = 7, .attn_chunk_len = 5, .attn_chunks_dynamic = false}, seed++);  // fixed chunks
    compare(k, {.attn_chunk_len = 8, .attn_chunks_dynamic = false}, seed++);
    compare(k, {.n_sm = 7, .attn_chunk_len = 5, .attn_chunks_dynamic = true}, seed++);  // ranges follow pos
    compare(k, {.attn_chunk_len = 8, .attn_chunks_dynamic = true}, seed++);
  }
}

// Rows of 2-4 KB: instructions span several ring pages (the small cases fit one page each), with the
// weight ring on (bulk copies and cp.async) and off (version 2's direct loads), on 7 SMs and on all.
TEST(Megakernel, MatchesCpuMultiPageRowsRingAndDirect) {
  const Case k{"llama hd128 gqa4 wide", cfg(Family::Llama, 128, 8, 2, 1032, 2056, false, 3001)};
  compare(k, {.n_sm = 7}, 101);
  compare(k, {.n_sm = 7, .weight_ring = false}, 102);
  compare(k, {}, 103);
  compare(k, {.attn_chunk_len = 8, .weight_ring = false}, 104);
}

// MlpDown's ring pages that hold one row pair (n_ff 6000: 2 rows of 12000 B) or one row (n_ff 8656) are split by
// columns over XB_SPLIT consumer warps (ring.cuh xb_split_part; column ranges of uneven length here), their partials
// added by whichever warp ends last: with flags and counters, on all SMs and on 7 (several pages per slot, so each
// slot's arrival counter is reused), within tolerance of the CPU.
TEST(Megakernel, SplitDownPagesMatchCpu) {
  for (const int n_ff : {6000, 8656}) {
    const std::string name = cat("llama hd64 gqa4 n_ff ", n_ff);
    const Case k{name.c_str(), cfg(Family::Llama, 64, 8, 2, 256, n_ff, false)};
    compare(k, {}, 121);
    compare(k, {.n_sm = 7}, 122);
    compare(k, {.n_sm = 7, .flag_publish = 0, .mid_resid = false}, 123);
  }
}

// The shared-memory plan with inline attention (megakernel_backend.cu): the K/V stage takes its room before
// MlpGateUp's extra ring page (session 32; session 22 had reserved the page's room first where a page holds a single
// row of the widest matrix, 8B's shape). At a context whose stage fills the room both a narrow model and a wide one
// (down rows of n_ff > 8192: single-row pages) get ring_pages pages and no extra one; the wide model's stage holds more
// than 100 positions (75 under session 22's plan on an H200), all in attn_flat's tiles, and its plan (single-row
// MlpDown pages read once, act as bf16 pairs) gives the CPU's tokens.
TEST(Megakernel, StageBeforeExtraPage) {
  const int ctx = 256;
  Model narrow = make_random_model(cfg(Family::Qwen3, 128, 8, 2, 256, 512, false), DType::BF16, 91);
  Model wide = make_random_model(cfg(Family::Qwen3, 128, 8, 2, 256, 8656, false), DType::BF16, 92);
  auto bn = make_mk(narrow, ctx, {});
  auto bw = make_mk(wide, ctx, {});
  ASSERT_TRUE(bn && bw);
  const MegakernelOptions d{};
  EXPECT_EQ(bn->ring_pages(), d.ring_pages);
  EXPECT_EQ(bw->ring_pages(), d.ring_pages);
  EXPECT_GT(bw->attn_stage(), 100);
  EXPECT_EQ(bw->attn_flat_tiles(), bw->attn_stage() / 16);
  const std::vector<int32_t> prompt = {3, 141, 59, 26};
  std::vector<float> logits(static_cast<size_t>(wide.config.n_vocab));
  ASSERT_TRUE(bw->forward(prompt, 0, logits).ok());
  std::vector<int32_t> out(16);
  const Status st = bw->generate_greedy(argmax(logits), int(prompt.size()), out, 4);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_cpu_greedy_prefix(wide, prompt, out);
}

TEST(Megakernel, KStepsPerLaunchEqualOneStepPerLaunch) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Model m = make_random_model(k.c, DType::BF16, 42);
    std::vector<int32_t> prompt = {5, 17, 300, 2, 99};
    std::vector<float> logits(static_cast<size_t>(k.c.n_vocab));
    std::vector<std::vector<int32_t>> outs;
    for (int spl : {1, 4, 32}) {
      auto b = make_mk(m, 64, {.attn_chunk_len = spl == 4 ? 16 : 0});
      ASSERT_TRUE(b);
      ASSERT_TRUE(b->forward(prompt, 0, logits).ok());
      std::vector<int32_t> out(32);
      auto st = b->generate_greedy(argmax(logits), int(prompt.size()), out, spl);
      ASSERT_TRUE(st.ok()) << st.message();
      outs.push_back(out);
    }
    EXPECT_EQ(outs[0], outs[2]);  // same schedule: bit-identical
    // Chunk ranges that follow pos, on 7 SMs: 1 and 8 steps per launch bit-identical.
    std::vector<std::vector<int32_t>> v6;
    for (int spl : {1, 8}) {
      auto b = make_mk(m, 64, {.n_sm = 7, .attn_chunk_len = 12, .attn_chunks_dynamic = true});
      ASSERT_TRUE(b);
      ASSERT_TRUE(b->forward(prompt, 0, logits).ok());
      std::vector<int32_t> out(32);
      ASSERT_TRUE(b->generate_greedy(argmax(logits), int(prompt.size()), out, spl).ok());
      v6.push_back(out);
    }
    EXPECT_EQ(v6[0], v6[1]);
    expect_cpu_greedy_prefix(m, prompt, outs[0]);
  }
}

// Switches that must not change the arithmetic: for each option set, a 140-token prompt (token i = (i * mul +
// add) mod n_vocab) is run once per mode, with configure(backend, mode) applied first; every mode's logits are
// within tolerance of the CPU and bit-identical to mode 0's -- or, with `cls`, to the first mode of the same class
// cls(options, mode) (modes that run other arithmetic, e.g. split attention's flag instance, session 13 mk9),
// the classes' logits within SPLIT_TOL of each other.
constexpr double SPLIT_TOL = 2e-3;  // the same attention summed in another order (fp32)
void expect_modes_bit_identical(const Model& m, int mul, int add, const std::vector<MegakernelOptions>& opts,
                                int n_modes, const std::function<void(MegakernelBackend&, int)>& configure,
                                const std::function<int(const MegakernelOptions&, int)>& cls = {}) {
  std::vector<int32_t> prompt(140);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * size_t(mul) + size_t(add)) % size_t(m.config.n_vocab));
  CpuBackend cpu(m, 160);
  std::vector<float> ref(static_cast<size_t>(m.config.n_vocab));
  ASSERT_TRUE(cpu.forward(prompt, 0, ref).ok());
  for (const MegakernelOptions& opt : opts) {
    std::vector<std::vector<float>> first(static_cast<size_t>(n_modes));
    for (int mode = 0; mode < n_modes; ++mode) {
      SCOPED_TRACE(cat("n_sm ", opt.n_sm, " chunk ", opt.attn_chunk_len, " stage ", opt.attn_stage_positions, " mode ", mode));
      auto b = make_mk(m, 160, opt);
      ASSERT_TRUE(b);
      configure(*b, mode);
      std::vector<float> a(ref.size());
      auto st = b->forward(prompt, 0, a);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_LT(rel_err(a, ref), LOGITS_TOL);
      const size_t k = cls ? size_t(cls(opt, mode)) : 0;
      if (first[k].empty()) first[k] = a;
      else EXPECT_EQ(a, first[k]);
      if (!first[0].empty()) EXPECT_LT(rel_err(a, first[0]), SPLIT_TOL);
    }
  }
}

// The prefetch before the wait (norm weights, block table, the K/V stage of the attention) changes only when
// loads are issued, never the arithmetic: on/off give bit-identical logits, and match the CPU. 140 positions
// with attention inline (flags; attn_short: staged and in-place positions both in use with a 37-position stage;
// and attn_range), inline with counters (attn_range) and with split chunks, on all SMs and on 7 -- and split chunks
// streamed by one warp (attn_mma_warps = 1), fixed chunks of 96 positions and ranges that follow pos: up to 6 tiles
// per stream, so attn_mma's ring is refilled tile after tile behind the stages issued before the wait (session 26).
TEST(Megakernel, PrefetchBitIdentical) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 77);
  expect_modes_bit_identical(m, 37, 11,
                             {MegakernelOptions{}, MegakernelOptions{.attn_short = false},
                              MegakernelOptions{.attn_stage_positions = 37}, MegakernelOptions{.flag_publish = 0},
                              MegakernelOptions{.n_sm = 7, .attn_chunk_len = 24},
                              MegakernelOptions{.n_sm = 7, .attn_chunk_len = 96, .attn_chunks_dynamic = false, .attn_mma_warps = 1},
                              MegakernelOptions{.n_sm = 3, .attn_chunk_len = 64, .attn_mma_warps = 1}},
                             2, [](MegakernelBackend& b, int mode) { b.set_prefetch(mode == 0); });
}

// Session 14: the prefetch gate (ring.cuh s_gate) only delays when the loader issues a MlpDown's or QkvProj's pages past
// the first gate_pages: logits bit-identical with the gate at 1 and 3 pages and without, and with MlpGateUp's own gate
// (session 20: gate_pages_gate_up, with the 5th ring page of gate_up_extra_pages) at 2 against 1 for the others, flags
// and counters, inline and split attention, on 1 and 2 SMs (there every such instruction spans several ring pages, so
// the loader does wait); greedy tokens over 24 steps at 8 per launch (the gate across steps) equal with and without it.
TEST(Megakernel, PrefetchGateBitIdentical) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 79);
  expect_modes_bit_identical(m, 29, 7,
                             {MegakernelOptions{.n_sm = 1}, MegakernelOptions{.n_sm = 2, .flag_publish = 0},
                              MegakernelOptions{.n_sm = 2, .attn_chunk_len = 24}},
                             4, [](MegakernelBackend& b, int mode) {
                               ASSERT_GT(b.ring_pages(), 0);
                               const int gate[4] = {0, 1, 3, 1}, gate_up[4] = {0, 0, 0, 2};
                               b.set_gate_pages(gate[mode]);
                               b.set_gate_pages_gate_up(gate_up[mode]);
                             });
  const std::vector<int32_t> p5 = {5, 17, 300 % k.c.n_vocab, 2, 99};
  const std::vector<int32_t> off = mk_greedy(m, p5, {.n_sm = 1, .gate_pages = 0}, 24, 8);
  ASSERT_EQ(off.size(), 24u);
  EXPECT_EQ(mk_greedy(m, p5, {.n_sm = 1, .gate_pages = 1}, 24, 8), off);
}

// Version 7's switches change only how activations are published and which already-summed vector the
// residual readers start from, never the arithmetic or its order (inline attention through attn_range here:
// attn_short runs in the flag instance only): flag-in-data publishing and the mid-layer
// residual, alone, give logits bit-identical to the counter protocol (and within tolerance of the CPU), inline
// attention, all SMs and 7. Together they sum the mid-layer residual in the fixed-point accumulator (session 25,
// isa.h mid_acc_word): bit-identical among themselves (whatever order the contributions land in), within SPLIT_TOL
// of the others. With split attention the flag instance's chunks run attn_mma (session 17: other arithmetic), so
// there flags are bit-identical among themselves, counters among themselves, the two within SPLIT_TOL; and K steps
// per launch with flags give the same tokens as one step per launch with counters.
TEST(Megakernel, FlagPublishAndMidResidualBitIdentical) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 78);
  // bit 0: flags, bit 1: mid_resid, bit 2: RoPE table before the wait
  expect_modes_bit_identical(m, 41, 5,
                             {MegakernelOptions{.attn_short = false}, MegakernelOptions{.n_sm = 7, .attn_chunk_len = 24},
                              MegakernelOptions{.attn_chunk_len = 16}},
                             8,
                             [](MegakernelBackend& b, int mode) {
                               b.set_flag_publish(mode & 1);
                               b.set_mid_resid(mode & 2);
                               b.set_rope_early(mode & 4);
                             },
                             [](const MegakernelOptions& o, int mode) {
                               const bool acc = (mode & 3) == 3;  // flags + mid_resid
                               return o.attn_chunk_len > 0 ? (acc ? 2 : mode & 1) : (acc ? 1 : 0);
                             });
  for (const Case& kc : cases()) {
    SCOPED_TRACE(kc.name);
    Model mc = make_random_model(kc.c, DType::BF16, 43);
    std::vector<int32_t> p5 = {5, 17, 300 % kc.c.n_vocab, 2, 99};
    std::vector<float> logits(static_cast<size_t>(kc.c.n_vocab));
    std::vector<std::vector<int32_t>> outs;
    for (int v = 0; v < 4; ++v) {  // 7 SMs: counters, flags + mid 1 and 8 steps/launch; flags + mid split 8 steps
      auto b = make_mk(mc, 64, {.n_sm = 7, .attn_chunk_len = v == 3 ? 12 : 0, .flag_publish = v > 0 ? 1 : 0, .mid_resid = v > 0,
                                .attn_short = false});
      ASSERT_TRUE(b);
      b->set_rope_early(v > 0);
      ASSERT_TRUE(b->forward(p5, 0, logits).ok());
      std::vector<int32_t> out(24);
      auto st = b->generate_greedy(argmax(logits), int(p5.size()), out, v >= 2 ? 8 : 1);
      ASSERT_TRUE(st.ok()) << st.message();
      outs.push_back(out);
    }
    EXPECT_EQ(outs[0], outs[1]);
    EXPECT_EQ(outs[1], outs[2]);
    expect_cpu_greedy_prefix(mc, p5, outs[3]);  // split attention: other arithmetic
  }
}

// Session 25: the mid-layer residual accumulator (isa.h mid_acc_word) takes its two sets of words by the step's parity,
// each left zero by the step before; a launch of another protocol leaves them as they were, so the backend clears
// them before the next flags + mid_resid launch. Greedy tokens over 24 steps at 1, 8 and 5 steps per launch equal,
// and equal those of one backend that switches to the counter protocol and to no mid residual for a launch each,
// odd step counts in between (stale words would make a poll see too many contributions -- the watchdog -- or a step
// two back's sums).
TEST(Megakernel, MidAccumulatorAcrossLaunchesAndSwitches) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 91);
  const std::vector<int32_t> p5 = {5, 17, 300 % k.c.n_vocab, 2, 99};
  const std::vector<int32_t> ref = mk_greedy(m, p5, {}, 24, 1);
  ASSERT_EQ(ref.size(), 24u);
  for (int spl : {8, 5}) EXPECT_EQ(mk_greedy(m, p5, {}, 24, spl), ref) << spl << " steps per launch";
  expect_cpu_greedy_prefix(m, p5, ref);
  auto b = make_mk(m, 64, {});
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->flag_publish() && b->mid_resid());
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  ASSERT_TRUE(b->forward(p5, 0, logits).ok());
  std::vector<int32_t> out(ref.size());
  int32_t token = argmax(logits);
  int at = 0;
  // (steps, flags, mid_resid) per launch
  for (const auto& [n, flags, mid] : std::vector<std::tuple<int, bool, bool>>{
           {3, true, true}, {3, false, true}, {5, true, true}, {1, true, false}, {4, true, true}, {8, true, true}}) {
    b->set_flag_publish(flags);
    b->set_mid_resid(mid);
    const Status st = b->generate_greedy(token, int(p5.size()) + at, std::span(out).subspan(size_t(at), size_t(n)), n);
    ASSERT_TRUE(st.ok()) << st.message();
    at += n;
    token = out[size_t(at - 1)];
  }
  ASSERT_EQ(at, 24);
  EXPECT_EQ(out, ref);
}

// Session 13: the split attention's merge reads its group's chunk partials from a shared-memory stage (flags: polled
// into it; counters: copied after the wait), and the flag protocol's SPLIT instances compute each chunk on the tensor
// cores (attn_mma, session 17) where the counter instance keeps attn_range: on 7 SMs and all, for GQA 4 / head_dim 64,
// GQA 1 (records of 66 floats: the merge's scalar staging) and head_dim 128, flags with prefetch on and off are
// bit-identical, counters with prefetch on and off too, the two protocols within SPLIT_TOL (and the CPU's tolerance),
// and their greedy tokens (16 steps, 8 per launch) equal; the default protocol with split attention is flags.
TEST(Megakernel, SplitAttentionBothProtocols) {
  for (int kc : {0, 1, 4}) {
    const Case k = cases()[size_t(kc)];
    SCOPED_TRACE(k.name);
    Model m = make_random_model(k.c, DType::BF16, 82 + uint64_t(kc));
    expect_modes_bit_identical(
        m, 47, 3,
        {MegakernelOptions{.n_sm = 7, .attn_chunk_len = 24}, MegakernelOptions{.attn_chunk_len = 16},
         MegakernelOptions{.n_sm = 7, .attn_chunk_len = 5}},  // the stage grown past s_x
        4,
        [](MegakernelBackend& b, int mode) {  // bit 0: counters, bit 1: prefetch off
          EXPECT_GT(b.schedule().layout.n_chunks, 1);
          EXPECT_TRUE(b.flag_publish());  // the default
          b.set_flag_publish(!(mode & 1));
          b.set_prefetch(!(mode & 2));
        },
        [](const MegakernelOptions&, int mode) { return mode & 1; });
    const std::vector<int32_t> p5 = {5, 17, 300 % k.c.n_vocab, 2, 99};
    const std::vector<int32_t> flags = mk_greedy(m, p5, {.n_sm = 7, .attn_chunk_len = 6, .flag_publish = 1}, 16, 8);
    ASSERT_EQ(flags.size(), 16u);
    EXPECT_EQ(mk_greedy(m, p5, {.n_sm = 7, .attn_chunk_len = 6, .flag_publish = 0}, 16, 8), flags);
    expect_cpu_greedy_prefix(m, p5, flags);
  }
}

// Session 17: split attention on the tensor cores (ops/attn_mma.cuh, the flag protocol's SPLIT instances; it replaced
// session 13's attn_split). GQA 4 / head_dim 64, GQA 1 and GQA 8 / head_dim 128; chunks shorter than a 16-key tile
// and longer than several, starting anywhere within a tile (dynamic chunks of ceil((pos + 1) / n_chunks), fixed chunks of 5, 24, 40),
// 1, 2, 3 and all the warps that fit streaming tiles, 7 SMs and all: 140 positions within tolerance of the CPU,
// prefetch on / off bit-identical; greedy tokens (16 steps, 8 per launch) equal to the CPU's.
TEST(Megakernel, SplitAttentionMma) {
  for (int ci : {0, 1, 3}) {
    SCOPED_TRACE(cases()[size_t(ci)].name);
    Model m = make_random_model(cases()[size_t(ci)].c, DType::BF16, 131 + uint64_t(ci));
    std::vector<MegakernelOptions> opts;
    for (int w : {1, 2, 3, 0}) {
      opts.push_back({.n_sm = 7, .attn_chunk_len = 24, .attn_chunks_dynamic = false, .attn_mma_warps = w});
      opts.push_back({.attn_chunk_len = 24, .attn_mma_warps = w});
    }
    // Chunks shorter than a tile (the merge stage of GQA 8 / head_dim 128 holds at most ~13 chunks' records).
    opts.push_back({.n_sm = 7, .attn_chunk_len = ci == 3 ? 13 : 5, .attn_chunks_dynamic = false});
    opts.push_back({.n_sm = 7, .attn_chunk_len = 40, .attn_chunks_dynamic = false, .attn_mma_warps = 2});
    opts.push_back({.attn_chunk_len = 40});
    expect_modes_bit_identical(m, 59, 13, opts, 2, [](MegakernelBackend& b, int mode) {
      EXPECT_GT(b.schedule().layout.n_chunks, 1);
      ASSERT_TRUE(b.flag_publish());
      EXPECT_GE(b.attn_mma_warps(), 1);
      b.set_prefetch(mode == 0);
    });
    for (int w : {1, 3}) {
      auto b = make_mk(m, 160, {.attn_chunk_len = 24, .attn_mma_warps = w});
      ASSERT_TRUE(b);
      EXPECT_LE(b->attn_mma_warps(), w);  // at most those asked for: as many as have their stages in s_x
      EXPECT_GE(b->attn_mma_warps(), 1);
    }
    const std::vector<int32_t> p5 = {5, 17, 300 % cases()[size_t(ci)].c.n_vocab, 2, 99};
    const std::vector<int32_t> out = mk_greedy(m, p5, {.n_sm = 7, .attn_chunk_len = 6, .attn_mma_warps = 2}, 16, 8);
    ASSERT_EQ(out.size(), 16u);
    expect_cpu_greedy_prefix(m, p5, out);
  }
}

// Version 9: inline attention of short contexts in parallel phases (attn_short). Every family's case against
// the CPU over 20 positions with a stage of 5 positions (the rest read from L2 in place) and with attn_short off
// (attn_range, version 8's path); then 140 positions of GQA 4 / head_dim 64 and GQA 8 / head_dim 128 with the
// whole stage, a 37-position stage and 3 positions on 7 SMs: prefetch on/off bit-identical, all within
// tolerance of the CPU. (Flag protocol: attn_short runs in the flag instance only.)
TEST(Megakernel, ShortAttentionMatchesCpu) {
  uint64_t seed = 201;
  for (const Case& k : cases()) {
    compare(k, {.attn_stage_positions = 5}, seed++);
    compare(k, {.n_sm = 7, .attn_short = false}, seed++);
  }
  for (int ci : {0, 3}) {
    SCOPED_TRACE(cases()[size_t(ci)].name);
    Model m = make_random_model(cases()[size_t(ci)].c, DType::BF16, 92);
    // 0: defaults (flags); 1: prefetch off; 2: counters
    expect_modes_bit_identical(m, 37, 11,
                               {MegakernelOptions{}, MegakernelOptions{.attn_stage_positions = 37},
                                MegakernelOptions{.n_sm = 7, .attn_stage_positions = 3}},
                               2, [](MegakernelBackend& b, int mode) {
                                 ASSERT_GE(b.attn_short_max(), 140);
                                 ASSERT_TRUE(b.flag_publish());
                                 b.set_prefetch(mode != 1);
                               });
  }
}

// Session 32: attn_short's steps on the tensor cores from a flat stage of 16-key tiles (ops/attn_flat.cuh). GQA 4 /
// head_dim 64, GQA 1 and GQA 8 / head_dim 128, 140 positions: with the whole stage (10 tiles) on all SMs and 7, and
// with a 37-position stage (2 tiles: positions from 32 on fall back to attn_short in the same launch), flat with
// prefetch on / off bit-identical, flat off (attn_short) within SPLIT_TOL, all within tolerance of the CPU; greedy
// tokens (24 steps, 8 per launch) equal to the CPU's.
TEST(Megakernel, FlatAttentionMatchesShort) {
  for (int ci : {0, 1, 3}) {
    const Case k = cases()[size_t(ci)];  // a copy: cases() returns a temporary
    SCOPED_TRACE(k.name);
    Model m = make_random_model(k.c, DType::BF16, 151 + uint64_t(ci));
    expect_modes_bit_identical(
        m, 41, 7, {MegakernelOptions{}, MegakernelOptions{.n_sm = 7}, MegakernelOptions{.attn_stage_positions = 37}}, 3,
        [](MegakernelBackend& b, int mode) {  // 0: flat, 1: flat with prefetch off, 2: attn_short
          ASSERT_TRUE(b.flag_publish());
          ASSERT_GE(b.attn_short_max(), 140);
          ASSERT_GE(b.attn_flat_tiles(), 2);
          b.set_attn_flat(mode != 2);
          b.set_prefetch(mode != 1);
        },
        [](const MegakernelOptions&, int mode) { return mode == 2 ? 1 : 0; });
    const std::vector<int32_t> p5 = {5, 17, 300 % k.c.n_vocab, 2, 99};
    const std::vector<int32_t> out = mk_greedy(m, p5, {}, 24, 8);
    ASSERT_EQ(out.size(), 24u);
    expect_cpu_greedy_prefix(m, p5, out);
  }
}

// attn_short with K steps per launch (the stage issued before the wait from the step's second instruction on):
// 8 steps per launch = 1 step per launch, tokens equal to the CPU's greedy ones; a 5-position stage (positions
// past it from L2). Small: the compute-sanitizer case.
TEST(Megakernel, ShortAttentionKStepsEqualOneStep) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 91);
  std::vector<int32_t> p5 = {5, 17, 300 % k.c.n_vocab, 2, 99};
  std::vector<float> logits(static_cast<size_t>(k.c.n_vocab));
  std::vector<std::vector<int32_t>> outs;
  for (int spl : {1, 8}) {
    auto b = make_mk(m, 64, {.n_sm = 7, .attn_stage_positions = 5});
    ASSERT_TRUE(b);
    ASSERT_GT(b->attn_short_max(), 30);
    ASSERT_EQ(b->attn_stage(), 5);
    ASSERT_TRUE(b->forward(p5, 0, logits).ok());
    std::vector<int32_t> out(24);
    auto st = b->generate_greedy(argmax(logits), int(p5.size()), out, spl);
    ASSERT_TRUE(st.ok()) << st.message();
    outs.push_back(out);
  }
  EXPECT_EQ(outs[0], outs[1]);
  expect_cpu_greedy_prefix(m, p5, outs[0]);
}

// Version 10: the dynamic LM head (lm_dynamic: the LM head's pages past each SM's static share claimed by whichever
// SM's loader comes first) changes only which SM computes which logits, never the arithmetic; the Argmax is reduced
// by every consumer thread (ties to the smaller index). On and off give bit-identical logits (flags and counters,
// inline and split attention, all SMs and 7, a vocabulary of 5000 so that 7 SMs claim a quarter of the units) and
// the same greedy tokens with 1 and 8 steps per launch -- also on a one-layer model with n_embd 2904 (4-row units)
// -- equal to the CPU's.
TEST(Megakernel, DynamicLmHeadBitIdentical) {
  auto configure = [](MegakernelBackend& b, int mode) { b.set_lm_dynamic(mode & 1); };
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 79);
  expect_modes_bit_identical(m, 43, 7,
                             {MegakernelOptions{}, MegakernelOptions{.flag_publish = 0},
                              MegakernelOptions{.n_sm = 7, .attn_chunk_len = 24, .flag_publish = 1}},
                             2, configure);
  Model mv = make_random_model(cfg(Family::Llama, 64, 8, 2, 200, 344, false, 5000), DType::BF16, 81);
  expect_modes_bit_identical(mv, 45, 3, {MegakernelOptions{.n_sm = 7}, MegakernelOptions{.n_sm = 7, .flag_publish = 0}}, 2,
                             configure);
  const ModelConfig wide = test::tiny_config(Family::Llama, 8, 2, 64, 2904, 8656, /*n_layer=*/1, /*n_vocab=*/4099);
  Model mw = make_random_model(wide, DType::BF16, 80);
  for (const Model* mp : {&mv, &mw}) {
    SCOPED_TRACE(cat("n_embd ", mp->config.n_embd, " n_vocab ", mp->config.n_vocab));
    std::vector<int32_t> p5 = {5, 17, 300 % mp->config.n_vocab, 2, 99};
    std::vector<float> logits(static_cast<size_t>(mp->config.n_vocab));
    std::vector<std::vector<int32_t>> outs;
    std::vector<std::vector<float>> lg;
    for (int mode = 0; mode < 4; ++mode) {  // bit 1: 8 steps per launch
      auto b = make_mk(*mp, 64, {.n_sm = mp == &mv ? 7 : 0});
      ASSERT_TRUE(b);
      ASSERT_TRUE(b->flag_publish());
      configure(*b, mode);
      ASSERT_TRUE(b->forward(p5, 0, logits).ok());
      lg.push_back(logits);
      std::vector<int32_t> out(24);
      auto st = b->generate_greedy(argmax(logits), int(p5.size()), out, mode & 2 ? 8 : 1);
      ASSERT_TRUE(st.ok()) << st.message();
      outs.push_back(out);
    }
    for (int mode = 1; mode < 4; ++mode) {
      EXPECT_EQ(lg[size_t(mode)], lg[0]) << "mode " << mode;
      EXPECT_EQ(outs[size_t(mode)], outs[0]) << "mode " << mode;
    }
    expect_cpu_greedy_prefix(*mp, p5, outs[0]);
  }
}

// The sanitizer cases' prompt: through b and the CPU reference (8 positions), logits within tolerance; b's logits.
std::vector<float> tiny_prompt_logits(const Model& m, MegakernelBackend& b, const std::vector<int32_t>& prompt) {
  CpuBackend cpu(m, 8);
  std::vector<float> a(static_cast<size_t>(m.config.n_vocab)), r(a.size());
  const Status st = b.forward(prompt, 0, a);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(cpu.forward(prompt, 0, r).ok());
  EXPECT_LT(rel_err(a, r), LOGITS_TOL);
  return a;
}

// The dynamic LM head's smallest case with claims (7 SMs, 63 units: 6 static per slice, the rest claimed), 4
// positions, then 3 steps in one launch: compute-sanitizer's case for the claim path.
TEST(Megakernel, DynamicLmHeadTiny) {
  Model m = make_random_model(cfg(Family::Llama, 64, 8, 2, 200, 344, false, 5000), DType::BF16, 95);
  auto b = make_mk(m, 8, {.n_sm = 7});
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->lm_dynamic_on());
  ASSERT_GT(b->schedule().layout.lm_dynamic_units(), 0);
  const std::vector<int32_t> prompt = {3, 1, 4, 1};
  const std::vector<float> a = tiny_prompt_logits(m, *b, prompt);
  std::vector<int32_t> out(3);
  ASSERT_TRUE(b->generate_greedy(argmax(a), 4, out, 3).ok());
  expect_cpu_greedy_prefix(m, prompt, out);
}

// The smallest split-attention run (7 SMs, chunks of 3 positions, 6 positions, then 3 steps in one launch), flags (the
// default) and counters: compute-sanitizer's case for the merge stage and (flags) attn_mma (chunks of up to 3
// positions within 16-key tiles; single positions and empty chunks at the first positions); then fixed chunks of 5
// with one warp streaming the tiles.
TEST(Megakernel, SplitAttentionTiny) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 96);
  for (int run : {1, 0, 2}) {  // 1 flags, 0 counters, 2 flags with fixed chunks of 5 and one warp streaming tiles
    const MegakernelOptions o =
        run < 2 ? MegakernelOptions{.n_sm = 7, .attn_chunk_len = 3, .flag_publish = run}
                : MegakernelOptions{.n_sm = 7, .attn_chunk_len = 5, .attn_chunks_dynamic = false, .attn_mma_warps = 1};
    SCOPED_TRACE(cat("run ", run));
    auto b = make_mk(m, 12, o);
    ASSERT_TRUE(b);
    ASSERT_GT(b->schedule().layout.n_chunks, 1);
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
    const std::vector<float> a = tiny_prompt_logits(m, *b, prompt);
    std::vector<int32_t> out(3);
    ASSERT_TRUE(b->generate_greedy(argmax(a), int(prompt.size()), out, 3).ok());
    expect_cpu_greedy_prefix(m, prompt, out);
    // With stop ids (the STOP instances; flags: the SPLIT one): a launch that stops at out[1].
    b->truncate(int(prompt.size()));
    std::vector<int32_t> stopped(3);
    const std::vector<int32_t> stops = {out[1]};
    auto n = b->decode_greedy_until(argmax(a), int(prompt.size()), stops, stopped);
    ASSERT_TRUE(n.ok()) << n.message();
    const int want = out[0] == out[1] ? 1 : 2;
    EXPECT_EQ(*n, want);
    EXPECT_TRUE(std::equal(stopped.begin(), stopped.begin() + want, out.begin()));
  }
}

// The smallest attn_short run (2 SMs, a 2-position stage, 4 positions): compute-sanitizer racecheck's case.
TEST(Megakernel, ShortAttentionTiny) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 93);
  auto b = make_mk(m, 8, {.n_sm = 2, .attn_stage_positions = 2});
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->flag_publish());
  tiny_prompt_logits(m, *b, {3, 1, 4, 1});
}

// Session 32: attn_flat's compute-sanitizer case (the prompt's positions in the first of its tiles, 2 SMs), every
// family and group size.
TEST(Megakernel, FlatAttentionTiny) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Model m = make_random_model(k.c, DType::BF16, 94);
    auto b = make_mk(m, 40, {.n_sm = 2});
    ASSERT_TRUE(b);
    ASSERT_TRUE(b->flag_publish());
    ASSERT_GE(b->attn_flat_tiles(), 1);
    tiny_prompt_logits(m, *b, {3, 1, 4, 1});
  }
}

TEST(Megakernel, MatchesLayeredBackend) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 7);
  auto layered = make_cuda_backend(m, 64);  // the layered path's own weight layout
  ASSERT_TRUE(layered.ok()) << layered.message();
  auto mk_b = make_mk(m, 64, {});
  ASSERT_TRUE(mk_b);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> a(static_cast<size_t>(k.c.n_vocab)), b(a.size());
  ASSERT_TRUE(mk_b->forward(prompt, 0, a).ok());
  ASSERT_TRUE((*layered)->forward(prompt, 0, b).ok());
  EXPECT_LT(rel_err(a, b), LOGITS_TOL);
  // The other protocol and residual source (compute-sanitizer checks both with this test): counters run
  // attn_range, the flag default attn_short, so within tolerance, not bit-identical.
  auto mk_f = make_mk(m, 64, {.flag_publish = 0, .mid_resid = false});  // counters (the default here is flags)
  ASSERT_TRUE(mk_f);
  mk_f->set_rope_early(false);
  std::vector<float> f(a.size());
  ASSERT_TRUE(mk_f->forward(prompt, 0, f).ok());
  EXPECT_LT(rel_err(f, b), LOGITS_TOL);
}

// Session 23: the plan keeps attention inline only for caches of at most INLINE_ATTENTION_MAX positions that attn_short
// holds whole, and splits beyond (under flags, attn_mma and the merge stage); MegakernelOptions::inline_max moves the
// line up to what attn_short holds (GQA 4 / head_dim 64: 768), past which attn_range inline was the slowest plan.
TEST(Megakernel, InlineAttentionOnlyForShortCaches) {
  const Case k = cases()[0];
  Model m = make_random_model(k.c, DType::BF16, 95);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<float> ref(static_cast<size_t>(k.c.n_vocab)), got(ref.size());
  CpuBackend cpu(m, 16);
  ASSERT_TRUE(cpu.forward(prompt, 0, ref).ok());
  auto at_line = make_mk(m, INLINE_ATTENTION_MAX, {});
  ASSERT_TRUE(at_line);
  EXPECT_EQ(at_line->schedule().layout.n_chunks, 1);
  EXPECT_EQ(at_line->attn_short_max(), INLINE_ATTENTION_MAX);
  auto past_default = make_mk(m, INLINE_ATTENTION_MAX + 1, {});
  ASSERT_TRUE(past_default);
  EXPECT_GT(past_default->schedule().layout.n_chunks, 1);
  auto held = make_mk(m, 768, {.inline_max = 1024});  // clamped to what attn_short holds
  ASSERT_TRUE(held);
  EXPECT_EQ(held->schedule().layout.n_chunks, 1);
  EXPECT_EQ(held->attn_short_max(), 768);
  auto past = make_mk(m, 800, {.inline_max = 1024});
  ASSERT_TRUE(past);
  EXPECT_GT(past->schedule().layout.n_chunks, 1);
  EXPECT_TRUE(past->flag_publish());
  ASSERT_TRUE(past->forward(prompt, 0, got).ok());
  EXPECT_LT(rel_err(got, ref), LOGITS_TOL);
  auto no_short = make_mk(m, 800, {.attn_short = false});  // attn_range inline, as far as 1024 positions
  ASSERT_TRUE(no_short);
  EXPECT_EQ(no_short->schedule().layout.n_chunks, 1);
}

TEST(Megakernel, RefusesUnsupportedShapes) {
  auto c = cfg(Family::Llama, 32, 4, 2, 128, 256, false);
  Model m = make_random_model(c, DType::BF16, 1);
  auto b = make_megakernel_backend(m, 64);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("head_dim"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace mk::megakernel
