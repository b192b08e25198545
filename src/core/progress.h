// ProgressBar: one self-rewriting line on a terminal ("loading weights [####    ] 1.2/2.5 GB 48%
// 1.1 GB/s"), redrawn at most ~10 times a second. Used while checkpoint weights are paged in.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mk {

// True when stderr is a terminal (progress bars are only drawn there unless asked for).
bool stderr_is_tty();

class ProgressBar {
 public:
  // total: bytes (or units) at 100%. Draws on `out` (stderr by default).
  ProgressBar(std::string label, uint64_t total, std::FILE* out = stderr);
  ~ProgressBar();  // finishes the line if finish() was not called
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(uint64_t done);  // redraws if ~100 ms passed since the last draw
  void finish();               // draws 100% and ends the line

  // The text of one frame, without the leading '\r' (exposed for tests).
  static std::string render(const std::string& label, uint64_t done, uint64_t total, double seconds,
                            int width);

 private:
  void draw(uint64_t done);
  std::string label_;
  uint64_t total_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool finished_ = false;
  bool drawn_ = false;
};

}  // namespace mk
