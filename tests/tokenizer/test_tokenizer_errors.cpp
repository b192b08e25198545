// Tokenizer::load errors: each names the file and the field and says what was expected.
#include <gtest/gtest.h>

#include <fstream>

#include "megakernel/tokenizer.h"
#include "tiny_tokenizer.h"

namespace mk {
namespace {

std::string load_error(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  auto r = Tokenizer::load(test::write_tokenizer(j, config));
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.message();
}

TEST(TokenizerErrors, MissingFile) {
  auto r = Tokenizer::load("/nonexistent/dir/for/mk");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/nonexistent/dir/for/mk"), std::string::npos) << r.message();
}

TEST(TokenizerErrors, MalformedJson) {
  const auto dir = test::write_tokenizer(test::tiny_tokenizer_json());
  std::ofstream(dir / "tokenizer.json") << "{\"model\": {\"type\": \"BPE\", ";
  auto r = Tokenizer::load(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer.json"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("invalid JSON"), std::string::npos) << r.message();
}

TEST(TokenizerErrors, FieldsAreNamed) {
  struct Case {
    const char* expect;
    void (*edit)(nlohmann::json&);
  };
  const Case cases[] = {
      {"model.merges[2]", [](nlohmann::json& j) { j["model"]["merges"][2] = "he nosuchtoken"; }},
      {"model.merges[0]", [](nlohmann::json& j) { j["model"]["merges"][0] = 42; }},
      {"model.vocab", [](nlohmann::json& j) { j["model"]["vocab"] = "oops"; }},
      {"model.vocab[\"a\"]", [](nlohmann::json& j) { j["model"]["vocab"]["a"] = -3; }},
      {"model.type", [](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }},
      {"model.dropout", [](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }},
      {"model.unk_token", [](nlohmann::json& j) { j["model"]["unk_token"] = "<unk>"; }},
      {"normalizer.type", [](nlohmann::json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }},
      {"pre_tokenizer.pretokenizers[0].pattern", [](nlohmann::json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
       }},
      {"pre_tokenizer.pretokenizers[0].behavior",
       [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }},
      {"pre_tokenizer.pretokenizers[1].type",
       [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Metaspace"; }},
      {"decoder", [](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }},
      {"added_tokens[1].content", [](nlohmann::json& j) { j["added_tokens"][1]["content"] = 5; }},
      {"expected an object with a \"model\"", [](nlohmann::json& j) { j.erase("model"); }},
  };
  for (const Case& c : cases) {
    nlohmann::json j = test::tiny_tokenizer_json();
    c.edit(j);
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << msg;
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  }
}

TEST(TokenizerErrors, ConfigTokens) {
  const std::string msg = load_error(test::tiny_tokenizer_json(), {{"bos_token", "<s>"}});
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bos_token"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<s>"), std::string::npos) << msg;
  const std::string msg2 = load_error(test::tiny_tokenizer_json(), {{"eos_token", 7}});
  EXPECT_NE(msg2.find("eos_token"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace mk
