// Rewrites a tokenizer.json regex (written for Oniguruma, the engine inside `tokenizers`) so that PCRE2
// matches the same characters: \s becomes Oniguruma's exact white-space set (PCRE2's also holds U+180E),
// \p{L} / \p{N} / \d gain the letters and numbers of Unicode versions newer than PCRE2's tables, and \w
// becomes Oniguruma's (letters, marks, numbers, connector punctuation). Negated forms (\S, \P{..}, \D, \W)
// inside a character class are left to PCRE2 (no tokenizer.json we know uses them).
#pragma once
#include <string>

namespace mk::tok {

std::string onig_compatible_pattern(const std::string& pattern);

}  // namespace mk::tok
