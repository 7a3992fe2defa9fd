// LR schedules and the JSON form of a training configuration (see train_config.h).
#include "engine/run/run_config.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/usage_error.h"

namespace kiln {

namespace {
bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}
}  // namespace

LrSchedule LrSchedule::parse(const std::string& text, int64_t warmup_steps) {
  KILN_CHECK(warmup_steps >= 0, "--warmup must be >= 0, got ", warmup_steps);
  LrSchedule s;
  s.warmup_steps = warmup_steps;
  if (text == "none" || text.empty()) return s;
  if (text == "cosine") {
    s.kind = Kind::cosine;
    return s;
  }
  if (text.rfind("step:", 0) == 0) {
    const std::string rest = text.substr(5);
    const size_t colon = rest.find(':');
    double every = 0, gamma = 0;
    KILN_CHECK(colon != std::string::npos && parse_number(rest.substr(0, colon), &every) &&
                   parse_number(rest.substr(colon + 1), &gamma) && every >= 1 && every == std::floor(every) &&
                   gamma > 0,
               "--schedule '", text, "': expected step:EVERY_EPOCHS:GAMMA with EVERY >= 1 an integer and GAMMA > 0");
    s.kind = Kind::step;
    s.step_every_epochs = (int64_t)every;
    s.gamma = gamma;
    return s;
  }
  throw Error(str_cat("--schedule '", text, "': expected none, cosine or step:EVERY_EPOCHS:GAMMA"));
}

std::string LrSchedule::str() const {
  std::string base = kind == Kind::none ? "none"
                     : kind == Kind::cosine
                         ? "cosine"
                         : str_cat("step:", step_every_epochs, ":", gamma);
  return warmup_steps > 0 ? str_cat(base, "+warmup:", warmup_steps) : base;
}

optim::LRSchedulePtr LrSchedule::build(int64_t steps_per_epoch, int64_t total_steps) const {
  optim::LRSchedulePtr s;
  if (kind == Kind::cosine) s = std::make_shared<optim::CosineLR>(std::max<int64_t>(total_steps, 1));
  if (kind == Kind::step)
    s = std::make_shared<optim::StepLR>(step_every_epochs * std::max<int64_t>(steps_per_epoch, 1), gamma);
  if (warmup_steps > 0) return std::make_shared<optim::RampLR>(warmup_steps, s);
  return s ? s : std::make_shared<optim::ConstantLR>();
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["task"] = task;
  if (ignore_background) j["ignore_background"] = true;
  if (task == "segment") j["loss"] = loss;
  j["data"] = data;
  j["val"] = val;
  j["num_classes"] = num_classes;
  j["epochs"] = epochs;
  j["batch"] = batch;
  j["batch_memory"] = batch_memory.empty() ? nlohmann::json() : nlohmann::json(batch_memory);  // null: --batch
  j["accum"] = accum;
  j["drop_last"] = drop_last;
  j["optimizer"] = optimizer;
  j["lr"] = lr;
  j["momentum"] = momentum;
  j["weight_decay"] = effective_weight_decay();
  j["schedule"] = schedule;
  j["warmup"] = warmup;
  j["clip"] = clip;
  j["class_weights"] = class_weights;
  j["seed"] = seed;
  j["threads"] = threads;
  j["device"] = device;
  j["init"] = init;
  j["save"] = save;
  j["resume"] = resume;
  j["checkpoint_every"] = checkpoint_every;
  j["checkpoint_steps"] = checkpoint_steps;
  j["resume_override"] = resume_override;
  j["out"] = out;
  j["limit"] = limit;
  j["checkpoint"] = recompute;  // the ledger key keeps its old name
  j["memory_report"] = memory_report;
  j["report"] = report;
  j["curve_every"] = curve_every;
  j["image"] = image.to_json();
  j["alloc"] = alloc.to_json();
  j["amp"] = amp;
  j["kernels"] = kernels;
  j["channels_last"] = channels_last;
  if (amp) {
    j["amp_dtype"] = dtype_name(amp_dtype);  // absent in files written before bf16: f16
    j["amp_init_scale"] = amp_init_scale;
    j["amp_growth_interval"] = amp_growth_interval;
    j["max_skipped_steps"] = max_skipped_steps;
  }
  if (detect_anomaly) j["detect_anomaly"] = true;
  if (bucket_mb != 25) j["bucket_mb"] = bucket_mb;
  if (sync_bn) j["sync_bn"] = true;
  if (ranks > 1) j["ranks"] = ranks;  // data-parallel; absent: one process  // only when set: older ledgers and state files stay as they were
  return j;
}

void parse_checkpoint_every(const std::string& text, RunConfig* c) {
  const char* expected = "' (expected N or Nep epochs, Nsteps optimizer steps, or both: 2ep,500steps)";
  int64_t epochs = -1, steps = -1;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t digits = 0;
    while (digits < item.size() && item[digits] >= '0' && item[digits] <= '9') ++digits;
    const std::string unit = item.substr(digits);
    KILN_CHECK(digits > 0 && digits <= 12, "--checkpoint-every '", text, expected);
    const int64_t n = std::stoll(item.substr(0, digits));
    if (unit.empty() || unit == "ep" || unit == "epoch" || unit == "epochs") {
      KILN_CHECK(epochs < 0, "--checkpoint-every '", text, "': epochs given twice");
      epochs = n;
    } else if (unit == "steps" || unit == "step") {
      KILN_CHECK(steps < 0, "--checkpoint-every '", text, "': steps given twice");
      KILN_CHECK(n >= 1, "--checkpoint-every '", text, "': steps must be >= 1");
      steps = n;
    } else {
      throw Error(str_cat("--checkpoint-every '", text, expected));
    }
  }
  KILN_CHECK(epochs >= 0 || steps >= 0, "--checkpoint-every '", text, expected);
  // Steps alone: no extra file at epoch ends beyond the last one.
  c->checkpoint_every = epochs >= 0 ? epochs : 0;
  c->checkpoint_steps = steps >= 0 ? steps : 0;
}

std::vector<double> parse_double_list(const std::string& text, const char* what) {
  std::vector<double> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    double d = 0;
    KILN_CHECK(parse_number(item, &d), what, ": '", item, "' is not a number (in '", text, "')");
    KILN_CHECK(d >= 0, what, ": weights must be >= 0, got ", d);
    v.push_back(d);
  }
  KILN_CHECK(!v.empty(), what, ": empty list");
  return v;
}

DType parse_amp_dtype(const std::string& text) {
  if (text.empty() || text == "f16") return DType::f16;
  if (text == "bf16") return DType::bf16;
  throw UsageError(str_cat("--amp '", text, "': expected f16 or bf16 (or --amp alone: f16)"));
}

bool auto_channels_last(const RunConfig& c, const Device& device) {
  return c.amp && c.amp_dtype == DType::bf16 && device.is_cpu();
}

void resolve_channels_last(RunConfig* c, const Device& device) {
  KILN_USAGE_CHECK(!(c->channels_last && c->no_channels_last),
                   "train: --channels-last and --no-channels-last contradict each other: give one (or neither: "
                   "channels-last for --amp bf16 on the CPU, NCHW otherwise)");
  const bool on = c->channels_last || (!c->no_channels_last && auto_channels_last(*c, device));
  c->channels_last = on;
  c->no_channels_last = !on;
}

int parse_recompute_option(const std::string& text) {
  if (text == "auto") return -1;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  KILN_USAGE_CHECK(!text.empty() && end == text.c_str() + text.size() && v >= 0 && v <= 1000, "--checkpoint '", text,
             "': expected a segment count >= 0 or auto");
  return (int)v;
}

}  // namespace kiln
