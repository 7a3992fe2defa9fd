// MemoryWatch: a leak watch for training loops. Called at the same point of every step (after the
// optimizer step), it reads the live bytes of the device's caching allocator per (tag, module
// path) and reports when the total keeps growing — the classic leak of keeping every step's loss
// or output tensor in a list. The rule (pinned by tests/unit/test_memory_watch.cpp):
//   - the first `warmup_steps` observations after a (re)start are not judged (optimizer state is
//     created in step 1); a change of `shape_key` (batch size, image size schedule) restarts;
//   - growth is reported when the live total grew by more than `threshold_bytes` in each of
//     `consecutive` successive steps; the report names the (tag, module) that grew most over those
//     steps and its bytes per step, once per restart.
// It reads allocator statistics only; it must not allocate tensors or change what training does.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/device.h"

namespace kiln::train {

struct MemoryWatchOptions {
  int warmup_steps = 2;
  int consecutive = 4;           // M
  int64_t threshold_bytes = 256; // per step, on the live total
};

struct MemoryGrowth {
  std::string tag;               // "temporary", "activation", ...
  std::string module;            // module path, "(top level)" outside any module
  int64_t bytes_per_step = 0;    // of that (tag, module), averaged over the growing steps
  int64_t total_per_step = 0;    // of all live bytes, averaged over the growing steps
  int64_t steps = 0;             // growing steps seen
  int64_t at_step = 0;           // observation index (1-based since the last restart)
  std::string message() const;   // one line for a log
};

class MemoryWatch {
 public:
  explicit MemoryWatch(Device device, MemoryWatchOptions options = {});
  // One observation at the step's fixed point; returns the growth once when the rule fires.
  std::optional<MemoryGrowth> observe(int64_t shape_key = 0);
  void restart();
  bool active() const;  // false when the device has no caching allocator (nothing to watch)

 private:
  using Account = std::map<std::pair<std::string, std::string>, int64_t>;  // (tag, module) -> bytes
  Account snapshot() const;

  Device device_;
  MemoryWatchOptions o_;
  int64_t key_ = 0;
  int64_t seen_ = 0;
  bool reported_ = false;
  std::vector<Account> history_;  // the last `consecutive` + 1 judged observations
};

}  // namespace kiln::train
