// Pre-tokenization: tokenizers' Split and ByteLevel pre-tokenizers (pre_tokenizers/split.rs,
// byte_level.rs) and NormalizedString::split for the delimiter behaviors.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace mk::tok {

namespace {
// GPT-2's split regex, used by ByteLevel when use_regex is true.
constexpr const char* GPT2_PATTERN =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Part {
  size_t begin, end;
  bool is_match;
};

std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ ").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Expected<SplitBehavior> parse_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  return make_error(where, ".behavior: expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                           "Contiguous; got ", j.dump());
}

bool json_bool(const nlohmann::json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}
}  // namespace

void split_by_matches(std::string_view text, const std::vector<Span>& matches, SplitBehavior behavior,
                      bool invert, std::vector<std::string_view>& out) {
  // Matches and the gaps between them, in order (tokenizers' Pattern::find_matches).
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  if (text.empty()) {
    parts.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (const Span& m : matches) {
      if (prev != m.begin) parts.push_back({prev, m.begin, false});
      parts.push_back({m.begin, m.end, true});
      prev = m.end;
    }
    if (prev != text.size()) parts.push_back({prev, text.size(), false});
  }
  if (invert)
    for (Part& p : parts) p.is_match = !p.is_match;

  std::vector<Part> splits;  // is_match now means "remove"
  splits.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (Part p : parts) splits.push_back({p.begin, p.end, false});
      break;
    case SplitBehavior::Removed:
      splits = parts;
      break;
    case SplitBehavior::Contiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !splits.empty()) splits.back().end = p.end;
        else splits.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !splits.empty()) splits.back().end = p.end;
        else splits.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.is_match && !previous_match && !splits.empty()) splits.back().begin = p.begin;
        else splits.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const Part& s : splits)
    if (!s.is_match && s.end > s.begin) out.push_back(text.substr(s.begin, s.end - s.begin));
}

Expected<bool> PreTokenizer::add_step(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return make_error(where, ": expected an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return make_error(where, ".pretokenizers: expected an array");
    for (size_t k = 0; k < j["pretokenizers"].size(); ++k)
      MK_TRY(add_step(j["pretokenizers"][k], cat(where, ".pretokenizers[", k, "]")));
    return true;
  }
  PreTokenizerStep step{};
  if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    const nlohmann::json& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    std::string pattern;
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
      pattern = pat["Regex"].get<std::string>();
    else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
      pattern = escape_literal(pat["String"].get<std::string>());
    else
      return make_error(where, ".pattern: expected {\"Regex\": string} or {\"String\": string}");
    auto re = Regex::compile(pattern, where + ".pattern");
    if (!re) return re.error();
    step.regex = *re;
    auto behavior = parse_behavior(j.contains("behavior") ? j["behavior"] : nlohmann::json(), where);
    if (!behavior) return behavior.error();
    step.behavior = *behavior;
    step.invert = json_bool(j, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.add_prefix_space = json_bool(j, "add_prefix_space", true);
    step.use_regex = json_bool(j, "use_regex", true);
    if (step.use_regex) {
      auto re = Regex::compile(GPT2_PATTERN, where + " (GPT-2 regex)");
      if (!re) return re.error();
      step.regex = *re;
    }
  } else {
    return make_error(where, ".type: unsupported pre-tokenizer \"", type,
                      "\" (supported: Split, ByteLevel, Sequence)");
  }
  steps_.push_back(std::move(step));
  return true;
}

Expected<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (j.is_null()) return p;
  MK_TRY(p.add_step(j, where));
  p.defer_byte_level_ = !p.steps_.empty() && p.steps_.back().kind == PreTokenizerStep::Kind::ByteLevel;
  return p;
}

void PreTokenizer::run(std::string_view segment, Pieces& out) const {
  std::vector<std::string_view> cur{segment}, next;
  std::vector<Span> matches;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const PreTokenizerStep& step = steps_[s];
    next.clear();
    for (std::string_view piece : cur) {
      if (step.kind == PreTokenizerStep::Kind::Split) {
        matches.clear();
        if (!piece.empty()) step.regex.find_all(piece, matches);
        split_by_matches(piece, matches, step.behavior, step.invert, next);
        continue;
      }
      // ByteLevel: prefix space, GPT-2 split, then the alphabet mapping (unless the model does it).
      if (step.add_prefix_space && (piece.empty() || piece.front() != ' ')) {
        out.arena.push_back(" " + std::string(piece));
        piece = out.arena.back();
      }
      const size_t first = next.size();
      if (step.use_regex) {
        matches.clear();
        step.regex.find_all(piece, matches);
        split_by_matches(piece, matches, SplitBehavior::Isolated, false, next);
      } else if (!piece.empty()) {
        next.push_back(piece);
      }
      if (s + 1 == steps_.size() && defer_byte_level_) continue;
      for (size_t k = first; k < next.size(); ++k) {
        std::string mapped;
        byte_level_encode(mapped, next[k]);
        out.arena.push_back(std::move(mapped));
        next[k] = out.arena.back();
      }
    }
    cur.swap(next);
  }
  for (std::string_view piece : cur)
    if (!piece.empty()) out.list.push_back(piece);
}

}  // namespace mk::tok
