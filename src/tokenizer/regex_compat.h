// Rewrites a tokenizer.json regex (written for Oniguruma, the engine inside `tokenizers`) so that PCRE2
// matches the same characters: \s becomes Oniguruma's exact white-space set (PCRE2's also holds U+180E),
// and \p{L} / \p{N} gain the letters and numbers of Unicode versions newer than PCRE2's tables.
// \S, \P{..} and \p{^..} inside a character class are left to PCRE2 (no pattern of ours uses them).
#pragma once
#include <string>

namespace mk::tok {

std::string onig_compatible_pattern(const std::string& pattern);

}  // namespace mk::tok
