// Tokenizer tests on a tokenizer.json written by the test (tiny_tokenizer.h): BPE merge order, added and
// special tokens, decode, invalid UTF-8, random round trips, threads; plus a few known ids of the real
// Llama 3 / Qwen3 files when they are present. Run: ctest -R Tokenizer (or build/test_tokenizer).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "megakernel/tokenizer.h"
#include "tiny_tokenizer.h"
#include "tokenizer/utf8.h"

namespace mk {
namespace {

Tokenizer tiny() {
  static const Tokenizer t = [] {
    auto r = Tokenizer::load(test::write_tokenizer(test::tiny_tokenizer_json(), {{"bos_token", "<|bos|>"},
                                                                                 {"eos_token", {{"content", "<|eos|>"}}}}));
    EXPECT_TRUE(r.ok()) << r.message();
    return *r;
  }();
  return t;
}

int32_t id(const Tokenizer& t, const char* token) {
  auto i = t.token_id(token);
  EXPECT_TRUE(i.has_value()) << token;
  return i.value_or(-1);
}

TEST(Tokenizer, MergesFollowRank) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("hello"), std::vector<int32_t>{id(t, "hello")});
  EXPECT_EQ(t.encode(" hello"), std::vector<int32_t>{id(t, "Ġhello")});
  // "hoo": only "o o" applies; "helloo": "hell o" (rank 3) wins over "o o" (rank 5) at the left o.
  EXPECT_EQ(t.encode("hoo"), (std::vector<int32_t>{id(t, "h"), id(t, "oo")}));
  EXPECT_EQ(t.encode("helloo"), (std::vector<int32_t>{id(t, "hello"), id(t, "o")}));
  // The pre-tokenizer splits "hello world" into "hello" and " world".
  const auto ids = t.encode("hello world");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], id(t, "hello"));
  EXPECT_EQ(ids[1], id(t, "Ġ"));
}

TEST(Tokenizer, AddedAndSpecialTokens) {
  const Tokenizer t = tiny();
  const int32_t bos = id(t, "<|bos|>"), eos = id(t, "<|eos|>"), think = id(t, "<think>"), r = id(t, "[R]");
  EXPECT_EQ(t.encode("<|bos|>hello<|eos|>"), (std::vector<int32_t>{bos, id(t, "hello"), eos}));
  EXPECT_EQ(t.encode("<think>"), std::vector<int32_t>{think});
  EXPECT_EQ(t.encode("<|bos"), (std::vector<int32_t>{id(t, "<"), id(t, "|"), id(t, "b"), id(t, "o"), id(t, "s")}));
  // rstrip: the spaces after [R] belong to it.
  EXPECT_EQ(t.encode("[R]   hello"), (std::vector<int32_t>{r, id(t, "hello")}));
  EXPECT_TRUE(t.is_special(bos));
  EXPECT_FALSE(t.is_special(think));
  EXPECT_EQ(t.bos_id(), bos);
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{eos});
  const std::vector<int32_t> ids = {bos, id(t, "hello"), think, eos};
  EXPECT_EQ(t.decode(ids), "<|bos|>hello<think><|eos|>");
  EXPECT_EQ(t.decode(ids, true), "hello<think>");
  EXPECT_EQ(t.token_text(id(t, "Ġhello")), "Ġhello");
  EXPECT_EQ(t.token_bytes(id(t, "Ġhello")), " hello");
  EXPECT_EQ(t.vocab_size(), think + 2);
  EXPECT_EQ(t.token_text(-1), "");
  EXPECT_EQ(t.token_text(t.vocab_size()), "");
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  const Tokenizer t = tiny();
  // Each maximal invalid subsequence is one U+FFFD (Python's errors="replace").
  const std::pair<std::string, std::string> cases[] = {
      {"\x80", "\xEF\xBF\xBD"},
      {"a\xE2\x82(", "a\xEF\xBF\xBD("},
      {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
      {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"caf\xC3\xA9\xCC", "caf\xC3\xA9\xEF\xBF\xBD"},
  };
  for (const auto& [bad, good] : cases) {
    EXPECT_EQ(tok::utf8_sanitize(bad), good);
    EXPECT_EQ(t.encode(bad), t.encode(good));
    EXPECT_EQ(t.decode(t.encode(bad)), good);
  }
  // Decoding ids whose bytes do not form UTF-8 follows the same rule.
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xE2, 0x82, 'x'}), "\xEF\xBF\xBDx");
}

TEST(Tokenizer, RandomTextRoundTrips) {
  const Tokenizer t = tiny();
  std::mt19937 rng(7);
  const char32_t pool[] = {'a', 'h', 'e', 'l', 'o', ' ', '\n', '\t', '1', '7', '\'', 's', 0xE9, 0x4E2D, 0x1F600, 0x200D,
                           0x301, 0xA0, 0x3000, '<', '|', '>'};
  for (int n = 0; n < 500; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) tok::utf8_append(s, pool[rng() % std::size(pool)]);
    const auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    for (int32_t i : ids) EXPECT_TRUE(i >= 0 && i < t.vocab_size());
  }
  for (int n = 0; n < 500; ++n) {  // random bytes: never crash, output is always valid UTF-8
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    const std::string d = t.decode(t.encode(s));
    EXPECT_TRUE(tok::utf8_is_valid(d));
    EXPECT_EQ(d, tok::utf8_sanitize(s));
  }
}

TEST(StreamDecoder, HoldsIncompleteCharacters) {
  const Tokenizer t = tiny();
  // "€" is E2 82 AC: one byte token each.
  StreamDecoder d(t);
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(d.push(id(t, "hello")), "hello");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
  // A byte that cannot continue the held ones releases them as U+FFFD at once.
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push('a'), "\xEF\xBF\xBD" "a");
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  const Tokenizer t = tiny();
  std::mt19937 rng(11);
  for (int n = 0; n < 300; ++n) {
    std::vector<int32_t> ids(rng() % 30);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % t.vocab_size());
    for (bool skip : {false, true}) {
      StreamDecoder d(t, skip);
      std::string out;
      for (int32_t i : ids) {
        const std::string piece = d.push(i);
        EXPECT_TRUE(tok::utf8_is_valid(piece));
        out += piece;
      }
      out += d.flush();
      EXPECT_EQ(out, t.decode(ids, skip));
    }
  }
}

TEST(Tokenizer, ThreadsGetTheSameIds) {
  const Tokenizer t = tiny();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += i % 7 ? " hello" : " helloo\n";
  const auto expected = t.encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] { ok[k] = t.encode(text) == expected && t.decode(expected) == text; });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(ok[k]) << k;
}

TEST(Tokenizer, RealFilesKnownIds) {
  const auto llama = test::real_tokenizer_dir("llama3"), qwen = test::real_tokenizer_dir("qwen3");
  if (llama.empty() || qwen.empty()) GTEST_SKIP() << "real tokenizer files not found (set MK_TOKENIZER_DATA)";
  auto l = Tokenizer::load(llama);
  auto q = Tokenizer::load(qwen);
  ASSERT_TRUE(l.ok()) << l.message();
  ASSERT_TRUE(q.ok()) << q.message();
  // Ids from tokenizers 0.23: Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids
  const char* text = "Hello, world! I'm 12345 <|im_start|> 中文 😀";
  EXPECT_EQ(l->encode(text), (std::vector<int32_t>{9906, 11, 1917, 0, 358, 2846, 220, 4513, 1774, 83739, 318, 5011,
                                                   91, 29, 73958, 17161, 91416}));
  EXPECT_EQ(q->encode(text), (std::vector<int32_t>{9707, 11, 1879, 0, 358, 2776, 220, 16, 17, 18, 19, 20, 220, 151644,
                                                   72858, 16744, 90316}));
  EXPECT_EQ(l->bos_id(), 128000);
  EXPECT_EQ(l->eos_ids(), std::vector<int32_t>{128001});
  EXPECT_FALSE(q->bos_id().has_value());
  EXPECT_EQ(q->eos_ids(), std::vector<int32_t>{151645});
  EXPECT_EQ(l->vocab_size(), 128256);
  EXPECT_EQ(l->decode(l->encode(text)), text);
}

}  // namespace
}  // namespace mk
