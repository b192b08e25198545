// Tests of the megakernel schedule (src/megakernel/schedule.cpp): every output row of every stage is
// owned by exactly one instruction, queues are in stage order, waits name earlier stages with the right
// counts, bytes are balanced on real shapes, and what cannot be placed is refused with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "megakernel/schedule.h"
#include "mk_test_util.h"
#include "model/shapes.h"

namespace mk::megakernel {
namespace {

TEST(SplitRows, CoversWithoutEmptySlicesAtGranularity) {
  for (int64_t n : {1, 15, 16, 17, 100, 2048, 8191}) {
    for (int slices : {1, 2, 7, 132, 1000}) {
      for (int gran : {1, 16, 64}) {
        auto r = split_rows(n, slices, gran);
        ASSERT_FALSE(r.empty());
        EXPECT_LE(int(r.size()), slices);
        EXPECT_EQ(r.front().first, 0u);
        EXPECT_EQ(r.back().second, uint32_t(n));
        for (size_t i = 0; i < r.size(); ++i) {
          EXPECT_LT(r[i].first, r[i].second);
          if (i) { EXPECT_EQ(r[i].first, r[i - 1].second); }
          if (i + 1 < r.size()) { EXPECT_EQ((r[i].second - r[i].first) % uint32_t(gran), 0u); }
        }
      }
    }
  }
}

// Marks rows [b, e) of `buf` as owned; fails on a row owned twice.
void own(std::map<std::string, std::vector<int>>& owners, const std::string& buf, int size, uint32_t b, uint32_t e) {
  auto& v = owners[buf];
  if (v.empty()) v.assign(size_t(size), 0);
  ASSERT_LE(e, uint32_t(size)) << buf;
  for (uint32_t i = b; i < e; ++i) ++v[i];
}

void check_schedule(const ModelConfig& c, const ScheduleOptions& o) {
  SCOPED_TRACE(cat("n_head ", c.n_head, " n_kv_head ", c.n_kv_head, " head_dim ", c.head_dim, " n_sm ", o.n_sm,
                   " max_context ", o.max_context, " chunk ", o.attn_chunk_len));
  auto s = build_schedule(c, o);
  ASSERT_TRUE(s.ok()) << s.message();
  const Layout& L = s->layout;
  ASSERT_EQ(s->n_sm(), o.n_sm);
  std::map<std::string, std::vector<int>> owners;
  std::map<uint32_t, int> signals;  // counter -> instructions signalling it per step
  std::vector<Instr> all;
  for (const auto& q : s->queues) {
    int last_stage = -1;
    for (const Instr& in : q) {
      // Stage key: (layer, stage order) must not decrease along a queue.
      int order = in.op == Op::LmHead          ? 1 << 30
                  : in.op == Op::SamplePartial ? (1 << 30) + 1
                  : in.op == Op::Argmax        ? (1 << 30) + 2
                                               : in.layer * 8 + int(in.op);
      EXPECT_GE(order, last_stage) << op_name(in.op);
      last_stage = order;
      signals[in.signal]++;
      all.push_back(in);
      ASSERT_GE(in.n_waits, 1);
      for (int w = 0; w < in.n_waits; ++w) ASSERT_LT(in.waits[w].counter, uint32_t(L.n_counters));
      std::string l = cat("[", in.layer, "]");
      switch (in.op) {
        case Op::QkvProj:
          own(owners, "qkv" + l, L.qkv_dim, in.row_begin, in.row_end);
          ASSERT_LE(in.aux_begin, in.aux_end);
          own(owners, "resid" + l, L.n_embd, in.aux_begin, in.aux_end);  // also 1 of the accumulator's 1 + n_kv_head
          break;                                                           // contributions (isa.h mid_acc_word)
        case Op::AttnPartial:
          own(owners, cat("att", l, in.group), L.n_chunks, in.chunk, in.chunk + 1);
          EXPECT_EQ(in.row_begin, uint32_t(in.chunk * L.chunk_len));
          break;
        case Op::AttnOProj:
          own(owners, cat("o_part", l, in.group), L.n_embd, in.row_begin, in.row_end);
          if (in.flags & FLAG_APPEND_KV) own(owners, cat("append", l), L.n_kv_head, in.group, in.group + 1);
          break;
        case Op::MlpGateUp:
          own(owners, "act" + l, L.n_ff, in.row_begin, in.row_end);
          own(owners, "resid_mid" + l, L.n_embd, in.aux_begin, in.aux_end);  // the mid-layer residual's slices
          break;
        case Op::MlpDown: own(owners, "down" + l, L.n_embd, in.row_begin, in.row_end); break;
        case Op::MlpGateUpDown:
          own(owners, "act" + l, L.n_ff, in.row_begin, in.row_end);
          own(owners, "resid_mid" + l, L.n_embd, in.aux_begin, in.aux_end);
          own(owners, "down" + l, L.n_down_parts, in.chunk, in.chunk + 1);
          break;
        case Op::LmHead:
          own(owners, "logits", L.n_vocab, in.row_begin, in.row_end);
          own(owners, "amax", L.n_lm_slices, in.chunk, in.chunk + 1);
          ASSERT_LE(in.aux_begin, in.aux_end);
          if (o.fuse_down) own(owners, "resid_in(n_layer) clears", L.n_embd, in.aux_begin, in.aux_end);  // resid_acc
          else EXPECT_EQ(in.aux_end, 0u);
          break;
        case Op::SamplePartial:  // whole tiles of the vocabulary, part k at k * sample_part_tiles tiles
          own(owners, "sample_part", L.n_sample_parts, in.chunk, in.chunk + 1);
          own(owners, "sample ids", L.n_vocab, in.row_begin, in.row_end);
          EXPECT_EQ(in.row_begin, uint32_t(in.chunk * L.sample_part_tiles * SAMPLE_TILE));
          EXPECT_TRUE(in.row_end == uint32_t(L.n_vocab) || (in.row_end - in.row_begin) % SAMPLE_TILE == 0);
          break;
        case Op::Argmax: own(owners, "token", 1, 0, 1); break;
        default: ADD_FAILURE() << "unexpected op " << int(in.op);
      }
    }
  }
  for (auto& [buf, v] : owners)
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 1) << buf << " row " << i;
  EXPECT_EQ(L.mid_resid, o.mid_resid ? 1 : 0);
  EXPECT_GE(L.qkv, L.resid + int64_t(c.n_layer) * c.n_embd);
  // The accumulators' two sets of words: resid_mid's, and with the fused MLP resid_in(l + 1)'s (isa.h resid_acc).
  EXPECT_EQ(L.acc_slots, (o.fuse_down && o.mid_resid ? 2 : 1) * c.n_layer);
  EXPECT_EQ(resid_acc(L), o.fuse_down && o.mid_resid);
  EXPECT_GE(L.logits, L.mid_acc + 2 * int64_t(L.acc_slots) * c.n_embd);
  EXPECT_GE(L.mid_acc, L.resid_mid + int64_t(c.n_layer) * c.n_embd);
  size_t expect_bufs = size_t(c.n_layer) * (5 + size_t(c.n_kv_head) + (L.n_chunks > 1 ? size_t(c.n_kv_head) : 0) +
                                            (L.n_chunks > 1 ? 0 : 1)) + 5 + (o.fuse_down ? 1 : 0);
  EXPECT_EQ(owners.size(), expect_bufs);
  // Every wait's count is the number of instructions that signal that counter in one step.
  for (const Instr& in : all)
    for (int w = 0; w < in.n_waits; ++w) EXPECT_EQ(in.waits[w].count, signals[in.waits[w].counter]) << op_name(in.op);
}

TEST(Schedule, OwnsEveryRowOnceAndWaitsOnEarlierStages) {
  using test::tiny_config;
  for (int n_sm : {1, 2, 7, 66, 132}) {
    check_schedule(tiny_config(Family::Llama, 8, 2, 64, 200, 300), {.n_sm = n_sm, .max_context = 40});
    check_schedule(tiny_config(Family::Qwen3, 6, 1, 128, 96, 100, 3), {.n_sm = n_sm, .max_context = 33, .attn_chunk_len = 8});
    check_schedule(tiny_config(Family::Qwen2, 8, 8, 64, 130, 77), {.n_sm = n_sm, .max_context = 5, .attn_chunk_len = 2});
    check_schedule(tiny_config(Family::Llama, 8, 2, 64, 200, 300),
                   {.n_sm = n_sm, .max_context = 40, .attn_chunk_len = 16, .fuse_down = true, .mid_resid = true});
    // More LmHead (and QkvProj) instructions than hidden rows: some publish no slice of the final residual.
    check_schedule(tiny_config(Family::Qwen2, 6, 1, 64, 40, 90, 2, 2000),
                   {.n_sm = n_sm, .max_context = 8, .fuse_down = true, .mid_resid = true, .lm_unit_rows = 16, .lm_static_units = 1});
  }
  for (const char* name : {"llama-3.2-1b", "qwen3-0.6b"}) {
    auto c = shape_config(name);
    ASSERT_TRUE(c.ok()) << c.message();
    check_schedule(*c, {.n_sm = 132, .max_context = 4096});
    check_schedule(*c, {.n_sm = 132, .max_context = 256, .fuse_down = true});
  }
}

TEST(Schedule, BalancesBytesOnRealShapes) {
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-1.7b"}) {
    auto c = shape_config(name);
    ASSERT_TRUE(c.ok()) << c.message();
    auto s = build_schedule(*c, {.n_sm = 132, .max_context = 256});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_LT(s->imbalance(), 1.10) << name << ": " << s->summary() << "\n" << s->stage_report;
    // Every weight byte is counted once: the estimate covers the model's matrices (+ KV reads).
    uint64_t weights = 0;
    weights += uint64_t(c->n_layer) * (uint64_t(c->q_dim() + 2 * c->kv_dim()) * c->n_embd +
                                       uint64_t(c->n_embd) * c->q_dim() + 3ull * c->n_ff * c->n_embd);
    weights += uint64_t(c->n_vocab) * c->n_embd;
    EXPECT_GE(s->total_bytes, 2 * weights) << name;
  }
}

TEST(Schedule, FusedMlpRemovesOneDependencyPointPerLayer) {
  auto c = shape_config("llama-3.2-1b");
  ASSERT_TRUE(c.ok());
  auto plain = build_schedule(*c, {.n_sm = 132, .max_context = 256});
  auto fused = build_schedule(*c, {.n_sm = 132, .max_context = 256, .fuse_down = true});
  ASSERT_TRUE(plain.ok() && fused.ok());
  auto stages = [](const Schedule& s) {
    std::set<std::pair<int, int>> st;
    for (const auto& q : s.queues)
      for (const Instr& in : q) st.insert({in.layer, int(in.op)});
    return st.size();
  };
  EXPECT_EQ(stages(*plain) - stages(*fused), size_t(c->n_layer));
  EXPECT_EQ(fused->total_bytes, plain->total_bytes);  // the same weights, read once
  EXPECT_EQ(fused->layout.n_down_parts, 132);
  // Under mid_resid its residual is accumulated (isa.h resid_acc): the LmHead instructions' aux ranges are
  // split_rows(n_embd, their count, 1), so that they clear the last layer's words once.
  auto mid = build_schedule(*c, {.n_sm = 132, .max_context = 256, .fuse_down = true, .mid_resid = true});
  ASSERT_TRUE(mid.ok());
  EXPECT_TRUE(resid_acc(mid->layout));
  EXPECT_FALSE(resid_acc(fused->layout));  // no mid_resid
  auto unfused_mid = build_schedule(*c, {.n_sm = 132, .max_context = 256, .mid_resid = true});
  ASSERT_TRUE(unfused_mid.ok());
  EXPECT_FALSE(resid_acc(unfused_mid->layout));
  std::vector<std::pair<uint32_t, uint32_t>> aux(size_t(mid->layout.n_lm_slices));
  for (const auto& q : mid->queues)
    for (const Instr& in : q)
      if (in.op == Op::LmHead) aux[in.chunk] = {in.aux_begin, in.aux_end};
  EXPECT_EQ(aux, split_rows(c->n_embd, mid->layout.n_lm_slices, 1));
}

TEST(Schedule, SplitsAttentionForLongContexts) {
  auto c = shape_config("llama-3.2-1b");
  ASSERT_TRUE(c.ok());
  auto s = build_schedule(*c, {.n_sm = 132, .max_context = 16384});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GT(s->layout.n_chunks, 1);
  EXPECT_GE(s->layout.n_chunks * c->n_kv_head, 120);  // attention work on (almost) every SM
  EXPECT_GE(s->layout.n_chunks * s->layout.chunk_len, 16384);
  auto short_ctx = build_schedule(*c, {.n_sm = 132, .max_context = 256});
  ASSERT_TRUE(short_ctx.ok());
  EXPECT_EQ(short_ctx->layout.n_chunks, 1);
  // inline_max (set by the device backend: MegakernelOptions::inline_max) moves the line between inline and split, for
  // static and dynamic chunks alike.
  for (bool dyn : {false, true}) {
    auto at_line = build_schedule(*c, {.n_sm = 132, .max_context = 768, .attn_chunks_dynamic = dyn, .inline_max = 768});
    ASSERT_TRUE(at_line.ok()) << at_line.message();
    EXPECT_EQ(at_line->layout.n_chunks, 1);
    auto past = build_schedule(*c, {.n_sm = 132, .max_context = 978, .attn_chunks_dynamic = dyn, .inline_max = 768});
    ASSERT_TRUE(past.ok()) << past.message();
    EXPECT_EQ(past->layout.n_chunks, 132 / c->n_kv_head);
    EXPECT_EQ(past->layout.chunk_dynamic, dyn ? 1 : 0);
    EXPECT_GE(past->layout.n_chunks * past->layout.chunk_len, 978);
    auto dflt = build_schedule(*c, {.n_sm = 132, .max_context = 978, .attn_chunks_dynamic = dyn});
    ASSERT_TRUE(dflt.ok());
    EXPECT_EQ(dflt->layout.n_chunks, 1);  // the default line: 1024
  }
}

// Dynamic chunk ranges (isa.h attn_chunk_range): at every position the chunks tile [0, pos] without
// overlap, exactly one holds pos (it appends), and the longest is an even share (ceil((pos + 1) / n)),
// whatever max_context is; n_chunks = n_sm / n_kv_head.
TEST(Schedule, DynamicChunksShareEveryContextEvenly) {
  auto c = shape_config("llama-3.2-1b");
  ASSERT_TRUE(c.ok());
  for (int max_ctx : {4096 + 128, 16384 + 128, 131072}) {
    auto s = build_schedule(*c, {.n_sm = 132, .max_context = max_ctx, .attn_chunks_dynamic = true});
    ASSERT_TRUE(s.ok()) << s.message();
    const Layout& L = s->layout;
    ASSERT_EQ(L.chunk_dynamic, 1);
    EXPECT_EQ(L.n_chunks, 132 / c->n_kv_head);
    for (int pos : {0, 1, 15, 16, 17, 100, 4095, 4096 + 127, 16383, max_ctx - 1}) {
      if (pos >= max_ctx) continue;
      std::vector<int> seen(size_t(pos) + 1, 0);
      int holders = 0, longest = 0;
      for (int ch = 0; ch < L.n_chunks; ++ch) {
        int p0, p1;
        attn_chunk_range(L, 0, 0, ch, pos, p0, p1);
        const int end = std::min(p1, pos + 1);
        for (int p = p0; p < end; ++p) ++seen[size_t(p)];
        holders += p0 <= pos && pos < p1;
        longest = std::max(longest, std::max(0, end - p0));
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), pos + 1) << "max_ctx " << max_ctx << " pos " << pos;
      EXPECT_EQ(holders, 1) << "pos " << pos;
      EXPECT_EQ(longest, (pos + L.n_chunks) / L.n_chunks) << "pos " << pos;
    }
  }
  // Static chunks (the default) keep the instruction's rows.
  auto st = build_schedule(*c, {.n_sm = 132, .max_context = 16384});
  ASSERT_TRUE(st.ok());
  int p0, p1;
  attn_chunk_range(st->layout, 64, 128, 1, 5000, p0, p1);
  EXPECT_EQ(p0, 64);
  EXPECT_EQ(p1, 128);
}

TEST(Schedule, RefusesWhatItCannotPlace) {
  auto c = test::tiny_config(Family::Llama, 8, 2, 64, 200, 300);
  auto expect_error = [](const ModelConfig& cfg, ScheduleOptions o, const std::string& needle) {
    auto s = build_schedule(cfg, o);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_error(c, {.n_sm = 0, .max_context = 16}, "n_sm");
  expect_error(c, {.n_sm = 4, .max_context = 0}, "max_context");
  expect_error(c, {.n_sm = 4, .max_context = 5000}, "max_position");
  auto bad = c;
  bad.n_kv_head = 3;
  expect_error(bad, {.n_sm = 4, .max_context = 16}, "n_kv_head");
  bad = c;
  bad.head_dim = 63;
  expect_error(bad, {.n_sm = 4, .max_context = 16}, "head_dim");
  bad = c;
  bad.n_head = bad.n_kv_head = 256;  // the accumulator counts 1 + n_kv_head contributions in 8 bits
  expect_error(bad, {.n_sm = 4, .max_context = 16}, "mid_acc_word");
  // The fused MLP's accumulator counts 1 + n_down_parts in the same 8 bits: 255 gate/up slices are too many.
  bad = c;
  bad.n_ff = 255 * 8;
  expect_error(bad, {.n_sm = 255, .max_context = 16, .fuse_down = true, .mid_resid = true}, "down partials");
  EXPECT_TRUE(build_schedule(bad, {.n_sm = 254, .max_context = 16, .fuse_down = true, .mid_resid = true}).ok());
  bad = c;
  bad.n_vocab = 1 << 24;
  expect_error(bad, {.n_sm = 4, .max_context = 16}, "n_vocab");
  bad = c;
  bad.max_position = 0;
  expect_error(bad, {.n_sm = 4, .max_context = 1 << 22, .attn_chunk_len = 1}, "chunks");
}

}  // namespace
}  // namespace mk::megakernel
