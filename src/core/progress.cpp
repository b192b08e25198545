// ProgressBar: a throttled one-line progress display (see progress.h).
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>

namespace mk {

bool stderr_is_tty() { return isatty(STDERR_FILENO) != 0; }

ProgressBar::ProgressBar(std::string label, uint64_t total, std::FILE* out)
    : label_(std::move(label)), total_(total), out_(out) {
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_;
}

ProgressBar::~ProgressBar() {
  if (drawn_ && !finished_) finish();
}

static std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string ProgressBar::render(const std::string& label, uint64_t done, uint64_t total,
                                double seconds, int width) {
  done = std::min(done, total);
  const double frac = total == 0 ? 1.0 : double(done) / double(total);
  const int filled = int(frac * width + 1e-9);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(width - filled), ' ');
  // Built with append: GCC 12 warns falsely (-Wrestrict) on chains of string operator+.
  std::string line = label;
  line.append(" [").append(bar).append("] ").append(human_bytes(double(done)));
  line.append(" / ").append(human_bytes(double(total)));
  char tail[64];
  std::snprintf(tail, sizeof tail, " %3d%%", int(frac * 100 + 1e-9));
  line += tail;
  if (seconds > 0.05) line.append(" ").append(human_bytes(double(done) / seconds)).append("/s");
  return line;
}

void ProgressBar::draw(uint64_t done) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Pad with spaces so a shorter frame fully overwrites the previous one.
  std::fprintf(out_, "\r%-100s", render(label_, done, total_, s, 30).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::update(uint64_t done) {
  if (finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done);
}

void ProgressBar::finish() {
  if (finished_) return;
  draw(total_);
  std::fputc('\n', out_);
  std::fflush(out_);
  finished_ = true;
}

}  // namespace mk
