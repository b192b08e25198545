// StopScanner tests: stop strings spanning pushes, partial holdback released at the end, UTF-8 tails
// held, and a random differential check against "cut the whole text at the first stop string".
#include <gtest/gtest.h>

#include <random>

#include "runtime/stop_scanner.h"

namespace mk {
namespace {

TEST(StopScanner, IncompleteUtf8Tail) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3"), 1u);          // 2-byte lead alone
  EXPECT_EQ(incomplete_utf8_tail("a\xC3\xA9"), 0u);      // é complete
  EXPECT_EQ(incomplete_utf8_tail("\xE2\x82"), 2u);       // € missing its last byte
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);   // 😀 missing one
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\x80\x80"), 0u);       // stray continuation bytes: nothing to wait for
  EXPECT_EQ(incomplete_utf8_tail("a\xFF"), 0u);          // invalid lead byte
}

TEST(StopScanner, StopSpanningPushesIsNotEmitted) {
  StopScanner s({"</end>"});
  std::string out;
  out += s.push("Hello </");
  EXPECT_EQ(out, "Hello ");  // "</" could start the stop string: held
  out += s.push("en");
  EXPECT_EQ(out, "Hello ");
  out += s.push("d> tail");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(out, "Hello ");
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.finish(), "");
}

TEST(StopScanner, FalseStartIsReleased) {
  StopScanner s({"abc"});
  EXPECT_EQ(s.push("xab"), "x");
  EXPECT_EQ(s.push("d"), "abd");
  EXPECT_EQ(s.push("ab"), "");
  EXPECT_EQ(s.finish(), "ab");
  EXPECT_FALSE(s.stopped());
}

TEST(StopScanner, EarliestOfSeveralStopsWins) {
  StopScanner s({"world", "lo w"});
  EXPECT_EQ(s.push("hello world"), "hel");
  EXPECT_TRUE(s.stopped());
}

TEST(StopScanner, HoldsIncompleteUtf8WithoutStops) {
  StopScanner s({});
  EXPECT_EQ(s.push("caf\xC3"), "caf");
  EXPECT_EQ(s.push("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.finish(), "\xF0\x9F");  // the end releases whatever is left
}

TEST(StopScanner, RandomPiecesMatchCutAtFirstStop) {
  std::mt19937 rng(17);
  const std::string alphabet = "ab \xC3\xA9";  // includes a 2-byte character split across pieces
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    for (int k = 0, n = 1 + int(rng() % 2); k < n; ++k) {
      std::string s;
      for (int j = 0, len = 1 + int(rng() % 3); j < len; ++j) s += "ab "[rng() % 3];
      stops.push_back(s);
    }
    std::string full;
    for (int j = 0, len = int(rng() % 20); j < len; ++j) full += alphabet[rng() % alphabet.size()];
    StopScanner sc(stops);
    std::string out, fed;
    bool stopped = false;
    size_t i = 0;
    while (i < full.size() && !stopped) {
      const size_t len = 1 + rng() % 3;
      const std::string piece = full.substr(i, len);
      i += len;
      fed += piece;
      out += sc.push(piece);
      stopped = sc.stopped();
    }
    if (!stopped) out += sc.finish();
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, fed.find(s));
    EXPECT_EQ(stopped, cut != std::string::npos);
    EXPECT_EQ(out, fed.substr(0, cut)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace mk
