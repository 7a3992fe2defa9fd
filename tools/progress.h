// The live progress line of a training epoch: "epoch 2/5  step 120/469  loss 0.4123  812 img/s
// ETA 0:31". On a TTY it is rewritten in place with '\r'; otherwise (logs, CI, pipes) one line is
// printed each ~10% of the epoch. Writes only to the stream it is given.
#pragma once
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

class ProgressLine {
 public:
  ProgressLine(std::ostream& os, bool tty, int64_t epoch, int64_t epochs, int64_t steps);
  // After step `step` (1-based) with the running mean loss and images seen so far this epoch.
  void update(int64_t step, double loss, int64_t images);
  // Clears a TTY line (the epoch summary follows on its own line).
  void finish();
  // Text appended to the line from now on (e.g. the --amp loss scale); "" for none.
  void set_suffix(const std::string& s) { suffix_ = s; }

 private:
  std::ostream& os_;
  bool tty_;
  int64_t epoch_, epochs_, steps_;
  int64_t next_report_ = 1;
  std::string suffix_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace kiln
