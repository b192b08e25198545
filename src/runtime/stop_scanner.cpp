// StopScanner: stop strings on streamed text, with UTF-8-safe release (see stop_scanner.h).
#include "runtime/stop_scanner.h"

#include <algorithm>

namespace mk {

size_t incomplete_utf8_tail(std::string_view s) {
  // Walk back over up to 3 continuation bytes (10xxxxxx) to the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((b & 0xE0) == 0xC0) need = 2;
    else if ((b & 0xF0) == 0xE0) need = 3;
    else if ((b & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;  // invalid lead bytes count as complete (emitted as they are)
  }
  return 0;  // only stray continuation bytes: nothing to wait for
}

std::string StopScanner::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // Earliest stop string occurrence wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t hold = incomplete_utf8_tail(held_);
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopScanner::finish() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace mk
