// Engine + the real tokenizer's StreamDecoder (Llama 3 files from ../shared/data/tokenizers/llama3; the
// test is skipped, saying so, when they are absent): byte-level tokens that split UTF-8 characters are
// streamed as whole characters, the streamed text equals Tokenizer::decode, and stop strings cut it.
#include <gtest/gtest.h>

#include <filesystem>

#include "fake_backend.h"
#include "megakernel/engine.h"
#include "megakernel/tokenizer.h"
#include "runtime/text_stream.h"

namespace mk {
namespace {

std::optional<Tokenizer> llama3_tokenizer() {
  const auto dir = std::filesystem::path(MK_SOURCE_DIR) / ".." / "shared" / "data" / "tokenizers" / "llama3";
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::nullopt;
  auto t = Tokenizer::load(dir);
  if (!t) ADD_FAILURE() << t.message();
  return t ? std::optional<Tokenizer>(std::move(*t)) : std::nullopt;
}

bool complete_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    i += n;
  }
  return true;
}

// Runs the engine on a backend that emits `script` (then repeats its last id) and returns streamed text.
GenerateResult run_script(const Tokenizer& tok, const std::vector<int32_t>& script, GenerateOptions o,
                          std::string* streamed) {
  testing::FakeBackend be(tok.vocab_size(), 512, [&](const std::vector<int32_t>& seq) {
    const size_t i = seq.size() - 1;  // the prompt is one token
    return script[std::min(i, script.size() - 1)];
  });
  Engine eng(be);
  TokenizerTextStream text(tok);
  auto r = eng.generate(std::vector<int32_t>{0}, o, &text, [&](std::string_view piece, auto) {
    EXPECT_TRUE(complete_utf8(piece)) << "a streamed piece ends inside a UTF-8 character";
    *streamed += piece;
    return true;
  });
  EXPECT_TRUE(r) << r.message();
  return r ? *r : GenerateResult{};
}

TEST(EngineTokenizer, ByteTokensStreamWholeCharactersAndMatchDecode) {
  auto tok = llama3_tokenizer();
  if (!tok) GTEST_SKIP() << "no Llama 3 tokenizer at ../shared/data/tokenizers/llama3";
  std::map<unsigned char, int32_t> byte_id;  // single-byte tokens of the byte-level vocabulary
  for (int32_t id = 0; id < tok->vocab_size() && byte_id.size() < 256; ++id) {
    const std::string b = tok->token_bytes(id);
    if (b.size() == 1 && !tok->is_special(id)) byte_id.emplace(static_cast<unsigned char>(b[0]), id);
  }
  ASSERT_EQ(byte_id.size(), 256u);
  const std::string s = "h\xC3\xA9llo \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87!";
  std::vector<int32_t> script;
  for (unsigned char c : s) script.push_back(byte_id.at(c));
  // Mix in whole-word tokens too.
  for (int32_t id : tok->encode(" and the end")) script.push_back(id);
  GenerateOptions o;
  o.max_new_tokens = int(script.size());
  std::string streamed;
  const auto r = run_script(*tok, script, o, &streamed);
  EXPECT_EQ(streamed, s + " and the end");
  EXPECT_EQ(streamed, tok->decode(script, /*skip_special=*/true));
  EXPECT_EQ(r.text, streamed);

  o.stop_strings = {"\xF0\x9F\x98\x80 \xE4"};  // starts mid-text, spans byte tokens
  streamed.clear();
  const auto r2 = run_script(*tok, script, o, &streamed);
  EXPECT_EQ(streamed, "h\xC3\xA9llo ");
  EXPECT_EQ(r2.stop, StopReason::StopString);
}

}  // namespace
}  // namespace mk
