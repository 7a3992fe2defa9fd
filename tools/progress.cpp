// Live progress line (see progress.h).
#include "tools/progress.h"

#include <cstdio>

namespace kiln {

ProgressLine::ProgressLine(std::ostream& os, bool tty, int64_t epoch, int64_t epochs, int64_t steps)
    : os_(os), tty_(tty), epoch_(epoch), epochs_(epochs), steps_(steps) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
  next_report_ = steps_ >= 10 ? steps_ / 10 : 1;
}

void ProgressLine::update(int64_t step, double loss, int64_t images) {
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (step != steps_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  } else {
    if (step < next_report_ && step != steps_) return;
    while (next_report_ <= step) next_report_ += steps_ >= 10 ? steps_ / 10 : 1;
  }
  last_draw_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? (double)images / secs : 0.0;
  const double eta = step > 0 ? secs / (double)step * (double)(steps_ - step) : 0.0;
  char buf[160];
  std::snprintf(buf, sizeof buf, "epoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f img/s  ETA %d:%02d",
                (long long)epoch_, (long long)epochs_, (long long)step, (long long)steps_, loss, rate,
                (int)eta / 60, (int)eta % 60);
  if (tty_) os_ << '\r' << buf << suffix_ << "\x1b[K" << std::flush;
  else os_ << buf << suffix_ << '\n' << std::flush;
}

void ProgressLine::finish() {
  if (tty_) os_ << "\r\x1b[K" << std::flush;
}

}  // namespace kiln
