// A run's allocator options (RunConfig::alloc; the `kiln train` flags of the same names):
//   --device-memory 6G     the training device behaves as if it had 6 GiB (a capacity-limited
//                          provider: on the CPU it simulates a small card);
//   --memory-snapshot F    allocator snapshot JSON (segments, blocks, tags, module paths, stats)
//                          at the end of the first optimizer step;
//   --trace F              Chrome trace JSON (Perfetto) of the first step's allocator events;
//   --alloc-trace F        the first step's alloc/free sequence as text ("a <id> <bytes> <tag>" /
//                          "f <id>"), the input bench/bench_alloc replays.
// plus the per-tag peak line printed after the first step and after each epoch. Must not train.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"

namespace kiln {

struct AllocOptions {
  std::string device_memory;  // "" = the device's real capacity
  std::string memory_snapshot, trace, alloc_trace;

  void validate() const;  // throws kiln::Error on a malformed --device-memory
  bool wants_trace() const { return !trace.empty() || !alloc_trace.empty(); }
  nlohmann::json to_json() const;
};

// Applies --device-memory to `d` (prints what it did). Call before the model is built.
void apply_device_memory(const AllocOptions& o, Device d, std::ostream& log);

// Around the first optimizer step of a run.
class FirstStepRecorder {
 public:
  FirstStepRecorder(const AllocOptions& o, Device d) : o_(o), d_(d) {}
  void begin();                    // starts the event ring when a trace is wanted
  void end(std::ostream& log);     // writes the files, prints the per-tag peak, stops the ring
  bool done() const { return done_; }

 private:
  AllocOptions o_;
  Device d_;
  bool done_ = false;
};

}  // namespace kiln
