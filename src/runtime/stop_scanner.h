// StopScanner: releases streamed text while holding back (a) a tail that could still grow into a stop
// string and (b) an incomplete UTF-8 character at the end. Once a stop string appears, the text before
// it is released and nothing after. Test: tests/runtime/test_stop_scanner.cpp.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mk {

class StopScanner {
 public:
  explicit StopScanner(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  }
  // Appends `text`; returns what may be emitted now. After a stop string is found returns "" forever.
  std::string push(std::string_view text);
  // End of the stream: releases everything still held (it contains no stop string).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings
  std::string held_;                // text received but not yet released
  bool stopped_ = false;
};

// Bytes at the end of `s` that start a UTF-8 character which is not complete yet (0..3).
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace mk
