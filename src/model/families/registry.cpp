// The list of model families (see model/family.h). One line per family file.
#include <string>

#include "model/family.h"

namespace mk {

extern const FamilySpec LLAMA_FAMILY;  // families/llama.cpp
extern const FamilySpec QWEN2_FAMILY;  // families/qwen2.cpp
extern const FamilySpec QWEN3_FAMILY;  // families/qwen3.cpp

const std::vector<const FamilySpec*>& all_families() {
  static const std::vector<const FamilySpec*> families = {&LLAMA_FAMILY, &QWEN2_FAMILY,
                                                          &QWEN3_FAMILY};
  return families;
}

const FamilySpec* find_family(std::string_view architecture) {
  for (const auto* f : all_families())
    if (architecture == f->architecture) return f;
  return nullptr;
}

const FamilySpec& family_spec(Family family) {
  for (const auto* f : all_families())
    if (f->family == family) return *f;
  MK_CHECK(false && "Family value without a FamilySpec in families/registry.cpp");
  return *all_families().front();
}

std::string_view family_name(Family f) { return family_spec(f).name; }

Status require_false(const ConfigReader& config, std::string_view key, std::string_view why) {
  auto v = config.bool_or(key, false);
  if (!v) return v.error();
  if (*v) return config.error(key, cat("is true, which is not supported (", why, ")"));
  return {};
}

Status require_silu(const ConfigReader& config) {
  auto act = config.string_or("hidden_act", "silu");
  if (!act) return act.error();
  if (*act != "silu") return config.expected("hidden_act", "\"silu\" (the only MLP activation supported)");
  return {};
}

}  // namespace mk
