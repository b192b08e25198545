// Chat-template API: loading from tokenizer_config.json / model folders (special tokens as strings or
// {"content": ...}, named template lists, chat_template.jinja), render_chat's context, bad input.
#include <filesystem>
#include <fstream>

#include "chat_test_util.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mk_chat_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
}  // namespace

TEST(ChatTemplate, LoadsLlama3AndRendersAConversation) {
  auto path = mk::testing::real_tokenizer_config("llama3");
  if (!path) GTEST_SKIP() << "SKIPPED: llama3/tokenizer_config.json not found (set MK_TOKENIZER_DATA)";
  auto t = mk::load_chat_template(*path);
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ(t->bos_token().value_or(""), "<|begin_of_text|>");
  EXPECT_EQ(t->eos_token().value_or(""), "<|end_of_text|>");
  std::vector<mk::ChatMessage> msgs = {{"system", " Be brief. "}, {"user", "Hi\n"}};
  auto out = mk::render_chat(*t, msgs, true);
  ASSERT_TRUE(out) << out.message();
  EXPECT_EQ(*out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Qwen3ThinkingSwitchAndReasoning) {
  auto path = mk::testing::real_tokenizer_config("qwen3");
  if (!path) GTEST_SKIP() << "SKIPPED: qwen3/tokenizer_config.json not found (set MK_TOKENIZER_DATA)";
  auto t = mk::load_chat_template(*path);
  ASSERT_TRUE(t) << t.message();
  EXPECT_FALSE(t->bos_token().has_value());  // null in the file
  EXPECT_EQ(t->eos_token().value_or(""), "<|im_end|>");
  std::vector<mk::ChatMessage> msgs = {{"user", "2+2?"}};
  auto on = mk::render_chat(*t, msgs, true);
  auto off = mk::render_chat(*t, msgs, true, ojson{{"enable_thinking", false}});
  ASSERT_TRUE(on && off);
  EXPECT_EQ(*on, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*off, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  mk::ChatMessage reply{"assistant", "4"};
  reply.reasoning_content = "add them";
  msgs.push_back(reply);
  auto hist = mk::render_chat(*t, msgs, false);
  ASSERT_TRUE(hist) << hist.message();
  EXPECT_EQ(*hist, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n");
}

TEST(ChatTemplate, ToolCallsAndExtraFieldsReachTheTemplate) {
  auto t = mk::ChatTemplate::parse(
      "{% for m in messages %}{{ m.role }}:{{ m.name | default('-') }}:{{ m.tool_calls | tojson }};{% endfor %}"
      "{{ tools | tojson }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token is defined }}");
  ASSERT_TRUE(t) << t.message();
  mk::ChatMessage m{"assistant", ""};
  m.tool_calls = ojson::parse(R"([{"type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}])");
  m.extra = ojson{{"name", "bot"}};
  auto out = mk::render_chat(*t, {m}, false);
  ASSERT_TRUE(out) << out.message();
  EXPECT_EQ(*out, "assistant:bot:[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
                  "{\"z\": 1, \"a\": 2}}}];null|None|False|False");
}

TEST(ChatTemplate, LoaderVariants) {
  fs::path d = temp_dir("loader");
  write(d / "tokenizer_config.json",
        R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}]})");
  auto t = mk::load_chat_template(d / "tokenizer_config.json");
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ(t->bos_token().value_or(""), "<s>");
  EXPECT_EQ(*mk::render_chat(*t, ojson::array(), false), "<s>D");
  // chat_template.jinja (transformers 5) wins over tokenizer_config.json; tokens still come from the config.
  write(d / "chat_template.jinja", "J{{ eos_token }}\n");
  auto j = mk::load_chat_template_from_dir(d);
  ASSERT_TRUE(j) << j.message();
  EXPECT_EQ(*mk::render_chat(*j, ojson::array(), false), "J</s>");
  fs::remove_all(d);
}

TEST(ChatTemplate, BadInputNamesTheProblem) {
  fs::path d = temp_dir("bad");
  auto err = [](const mk::Expected<mk::ChatTemplate>& r) { return r ? std::string() : r.message(); };
  EXPECT_NE(err(mk::load_chat_template(d / "absent.json")).find("absent.json: cannot open file"), std::string::npos);
  write(d / "a.json", "{not json");
  EXPECT_NE(err(mk::load_chat_template(d / "a.json")).find("not valid JSON"), std::string::npos);
  write(d / "b.json", R"({"eos_token": "x"})");
  EXPECT_NE(err(mk::load_chat_template(d / "b.json")).find("no 'chat_template'"), std::string::npos);
  write(d / "c.json", R"({"chat_template": "{% if %}"})");
  EXPECT_NE(err(mk::load_chat_template(d / "c.json")).find("c.json: chat_template"), std::string::npos);
  write(d / "e.json", R"({"chat_template": "x", "bos_token": 5})");
  EXPECT_NE(err(mk::load_chat_template(d / "e.json")).find("'bos_token' must be a string"), std::string::npos);
  write(d / "f.json", R"({"chat_template": [{"name": "other", "template": "x"}]})");
  EXPECT_NE(err(mk::load_chat_template(d / "f.json")).find("no entry named 'default' (found: other)"), std::string::npos);
  auto t = mk::ChatTemplate::parse("x");
  ASSERT_TRUE(t);
  auto bad = mk::render_chat(*t, ojson::parse("[1]"), false);
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("each message must be a JSON object"), std::string::npos);
  EXPECT_FALSE(mk::ChatTemplate().render(ojson::object()));
  fs::remove_all(d);
}
