// Golden test: the CPU forward pass against Hugging Face transformers on the tiny models of
// tests/golden/ (made by tools/make_golden.py): fp32 logits at every prompt position (relative error
// far under 1e-3) and the greedy continuation (exactly equal). On a mismatch the named activations
// at the last prompt position say where the computation first diverged.
// Run: build/test_cpu --gtest_filter='Golden*'
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "megakernel/model.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Logits relative error bound. transformers and this pass both compute in fp32 on the same weight
// values; the difference is summation order only (~1e-7 per op, a few layers deep).
constexpr double MAX_LOGITS_REL_ERR = 2e-5;

fs::path golden_dir() { return fs::path(MK_SOURCE_DIR) / "tests" / "golden"; }

std::vector<std::string> golden_models() {
  std::vector<std::string> names;
  if (fs::is_directory(golden_dir()))
    for (auto& e : fs::directory_iterator(golden_dir()))
      if (fs::exists(e.path() / "expected.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

double rel_err(std::span<const float> a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Logits restricted to the ids the golden file stores (all of them when `ids` is empty).
std::vector<float> select(const std::vector<float>& logits, const std::vector<int32_t>& ids) {
  if (ids.empty()) return logits;
  std::vector<float> out;
  for (int32_t id : ids) out.push_back(logits[size_t(id)]);
  return out;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, LogitsAndGreedyMatchTransformers) {
  fs::path dir = golden_dir() / GetParam();
  json expected = json::parse(std::ifstream(dir / "expected.json"));
  LoadOptions opts;
  opts.prefault = false;
  opts.progress = LoadOptions::Progress::Never;
  auto model = load_model(dir, opts);
  ASSERT_TRUE(model) << model.message();
  const int n_vocab = model->config.n_vocab;
  std::vector<int32_t> vocab_ids;
  if (!expected["logits_vocab_ids"].is_null()) vocab_ids = expected["logits_vocab_ids"].get<std::vector<int32_t>>();

  CpuBackend backend(*model, 128);
  double worst = 0;
  for (const json& c : expected["cases"]) {
    auto prompt = c["prompt"].get<std::vector<int32_t>>();
    auto want_logits = c["logits"].get<std::vector<std::vector<float>>>();
    auto want_greedy = c["greedy"].get<std::vector<int32_t>>();
    SCOPED_TRACE(cat("prompt of ", prompt.size(), " tokens"));
    ASSERT_EQ(want_logits.size(), prompt.size());

    // Named activations at the last prompt position, for the diagnosis below.
    std::map<std::string, std::vector<float>> got_acts;
    backend.set_hook([&](std::string_view name, int layer, int pos, std::span<const float> v) {
      if (pos != int(prompt.size()) - 1) return;
      std::string key = name == "h" ? cat("h.", layer) : std::string(name);
      if (key == "embd" || key == "final_norm" || name == "h") got_acts[key].assign(v.begin(), v.end());
    });

    backend.truncate(0);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    double case_worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      ASSERT_TRUE(backend.forward(std::span(&prompt[p], 1), int(p), logits).ok());
      double e = rel_err(select(logits, vocab_ids), want_logits[p]);
      case_worst = std::max(case_worst, e);
      EXPECT_LT(e, MAX_LOGITS_REL_ERR) << "logits at position " << p;
    }
    worst = std::max(worst, case_worst);
    if (case_worst >= MAX_LOGITS_REL_ERR) {
      for (auto& [name, want] : c["activations_last"].items()) {
        double e = rel_err(got_acts[name], want.get<std::vector<float>>());
        ADD_FAILURE() << "activation " << name << " at the last prompt position: rel. error " << e
                      << (e > 1e-5 ? "  <-- diverges" : "");
      }
    }
    backend.set_hook(nullptr);

    // Greedy continuation, one token per step, no EOS stop (as the tool made it).
    std::vector<int32_t> got_greedy;
    int pos = int(prompt.size());
    for (size_t i = 0; i < want_greedy.size(); ++i) {
      int32_t next = cpu::argmax(logits.data(), n_vocab);
      got_greedy.push_back(next);
      if (i + 1 < want_greedy.size()) {
        ASSERT_TRUE(backend.forward(std::span(&next, 1), pos++, logits).ok());
      }
    }
    EXPECT_EQ(got_greedy, want_greedy);

    // The whole prompt in one call gives the same last logits, bit for bit.
    backend.truncate(0);
    std::vector<float> batched(static_cast<size_t>(n_vocab));
    ASSERT_TRUE(backend.forward(prompt, 0, batched).ok());
    std::vector<float> stepwise(static_cast<size_t>(n_vocab));
    backend.truncate(0);
    for (size_t p = 0; p < prompt.size(); ++p)
      ASSERT_TRUE(backend.forward(std::span(&prompt[p], 1), int(p), stepwise).ok());
    EXPECT_EQ(batched, stepwise);
  }
  std::printf("[ golden   ] %-20s worst logits rel. error %.2e\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(golden_models()),
                         [](const auto& info) { return info.param; });

// The golden set must be there: a missing folder must fail, not skip.
TEST(GoldenSet, CoversTheFamiliesAndDtypes) {
  auto names = golden_models();
  EXPECT_GE(names.size(), 6u) << "tests/golden/ is missing models; run tools/make_golden.py";
  std::set<std::string> families, dtypes, spellings;
  for (auto& n : names) {
    json e = json::parse(std::ifstream(golden_dir() / n / "expected.json"));
    families.insert(e["family"].get<std::string>());
    dtypes.insert(e["dtype"].get<std::string>());
    spellings.insert(e["rope_spelling"].get<std::string>());
  }
  EXPECT_EQ(families, (std::set<std::string>{"llama", "qwen2", "qwen3"}));
  EXPECT_EQ(dtypes, (std::set<std::string>{"bf16", "f16", "f32"}));
  EXPECT_EQ(spellings, (std::set<std::string>{"legacy", "v5"}));
}

}  // namespace
}  // namespace mk
