// The run ledger (OUT/runs.jsonl): one JSON object a line, appended while a run trains, so runs
// can be listed and compared afterwards (`kiln runs`, `kiln report`). A run writes
//   {"record":"start","run":ID,...}   once, before its first step (so a killed run is still listed)
//   {"record":"step","run":ID,...}    a curve point every N optimizer steps (CurveRecorder)
//   {"record":"epoch","run":ID,...}   after each epoch (its train/val loss and accuracy)
//   {"record":"end","run":ID,"status":"ok"|"failed"|"refused",...}  the full record of the run (+ "error";
//                                    "refused": stopped before its first step, the only line of that run)
// Lines written before the ledger had records (no "record" key) are complete runs without curves.
// The reader never throws on content: a torn or foreign line is skipped with a warning naming the
// file and line. This file must not know the command line or print; callers choose what to record.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/train/fit.h"

namespace kiln::train {

// Appends records of one run to a ledger file. An empty path writes nothing (runs without --out).
class RunLedger {
 public:
  explicit RunLedger(std::string path);
  const std::string& path() const { return path_; }
  const std::string& run_id() const { return run_id_; }
  bool enabled() const { return !path_.empty(); }

  // "record":"start" with the run id, the time, the process id and host (a live process is "running").
  void start(nlohmann::json fields);
  void step(nlohmann::json point);    // "record":"step"
  void epoch(nlohmann::json fields);  // "record":"epoch"
  // "record":"end" with status "ok", "failed" or "refused" (error: the failure's message).
  void finish(nlohmann::json fields, const std::string& status, const std::string& error = "");

 private:
  void append(const char* record, nlohmann::json& line);
  std::string path_, run_id_;
};

// Keeps a curve at a bounded rate: fed every optimizer step, it returns one point every `every`
// steps (and at the run's first step) with the window's mean loss, images/s and skipped steps,
// the LR, the loss scale (with a scaler) and the live bytes by memory tag at the step's end.
class CurveRecorder {
 public:
  CurveRecorder(int64_t every, Device device, bool loss_scale);
  std::optional<nlohmann::json> observe(const FitStep& step);
  // At each epoch's start: the time since the previous epoch's last step (validation, saving state)
  // is left out of images/s.
  void epoch_begin();

 private:
  int64_t every_;
  Device device_;
  bool loss_scale_;
  bool first_ = true;
  double loss_sum_ = 0, window_start_s_ = 0, busy_s_ = 0, last_step_end_s_ = -1;
  int64_t samples_ = 0, skipped_ = 0;
};

// One run as read back: its records merged by run id, in the order the runs started.
struct LedgerRun {
  std::string id, file;
  std::string status;  // ok | failed | refused | killed (start without end) | running (its process is alive)
  std::string error;   // failed runs
  nlohmann::json start;                // null for old ledgers
  nlohmann::json end;                  // null when killed or running
  std::vector<nlohmann::json> epochs;  // per-epoch stats (epoch, train_loss, train_acc, val_loss, val_acc, ...)
  std::vector<nlohmann::json> curve;   // step points (step, epoch, loss, lr, ips, scale, skipped, mem{tag: bytes})
  int64_t last_step = -1;              // the last optimizer step the ledger knows of (-1: none)
  // The run's configuration (end line, else start line), null when neither has one.
  const nlohmann::json& config() const;
};

struct LedgerContents {
  std::vector<LedgerRun> runs;
  std::vector<std::string> warnings;  // "runs.jsonl:7: not a JSON object (a torn line?), skipped"
};

// Reads a ledger file (throws kiln::Error only when it cannot be opened).
LedgerContents read_ledger(const std::string& path);
// The same over text (file names the source in warnings).
LedgerContents parse_ledger(const std::string& text, const std::string& file);

}  // namespace kiln::train
