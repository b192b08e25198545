// Golden renderings from jinja2 (tests/chat/data/golden.json, made by `tools/chat_template_cases.py
// golden`): the Llama 3 and Qwen3 templates loaded from their tokenizer_config.json and rendered with
// render_chat, plus our feature templates. Needs no Python; the live comparison is ctest's
// chat_template_vs_jinja2.
#include <cstdio>
#include <fstream>

#include "chat_test_util.h"

using ojson = nlohmann::ordered_json;

TEST(ChatGolden, MatchesJinja2) {
  std::string dir = std::string(MK_SOURCE_DIR) + "/tests/chat/data/";
  std::ifstream f(dir + "golden.json");
  ASSERT_TRUE(f) << "missing " << dir << "golden.json";
  ojson golden = ojson::parse(f);
  std::map<std::string, mk::ChatTemplate> templates;
  std::vector<std::string> missing;  // real templates absent here: their cases are skipped, and said so
  for (const char* model : {"llama3", "qwen3"}) {
    auto path = mk::testing::real_tokenizer_config(model);
    if (!path) {
      missing.push_back(model);
      continue;
    }
    auto t = mk::load_chat_template(*path);
    ASSERT_TRUE(t) << t.message();
    templates.emplace(model, *t);
  }
  for (const auto& m : missing)
    std::printf("SKIPPED: golden cases of %s (tokenizer_config.json not found; set MK_TOKENIZER_DATA)\n", m.c_str());
  for (const auto& [name, spec] : golden["templates"].items()) {
    auto t = mk::ChatTemplate::parse(spec["template"].get<std::string>());
    ASSERT_TRUE(t) << name << ": " << t.message();
    auto token = [&](const char* k) {
      return spec[k].is_string() ? std::optional<std::string>(spec[k].get<std::string>()) : std::nullopt;
    };
    t->set_special_tokens(token("bos_token"), token("eos_token"));
    templates.emplace(name, *t);
  }
  int n_ok = 0, n_err = 0;
  ASSERT_GE(golden["cases"].size(), 100u);
  for (size_t i = 0; i < golden["cases"].size(); ++i) {
    const ojson& c = golden["cases"][i];
    auto it = templates.find(c["model"].get<std::string>());
    if (it == templates.end()) continue;  // a real template that is absent here (reported above)
    const mk::ChatTemplate& t = it->second;
    mk::Expected<std::string> out =
        c.contains("context") ? t.render(c["context"])
                              : mk::render_chat(t, c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
    const ojson& want = c["expected"];
    SCOPED_TRACE("case " + std::to_string(i) + " (" + c["model"].get<std::string>() + ")");
    if (want["ok"].get<bool>()) {
      ASSERT_TRUE(out) << out.message();
      EXPECT_EQ(*out, want["text"].get<std::string>());
      ++n_ok;
    } else {
      ASSERT_FALSE(out) << "jinja2 failed but we rendered: " << *out;
      if (want["raised"].is_string()) {
        EXPECT_NE(out.message().find(want["raised"].get<std::string>()), std::string::npos);
      }
      ++n_err;
    }
  }
  EXPECT_GT(n_ok, missing.empty() ? 150 : 40);  // most cases render; the rest check errors
  EXPECT_GT(n_err, 0);
}
