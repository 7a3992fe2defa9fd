// The run ledger's writer, curve recorder and reader (see run_ledger.h).
#include "engine/train/run_ledger.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "engine/memory/tag.h"
#include "engine/train/memory_peak.h"

namespace kiln::train {

namespace {

std::string utc_now(const char* format) {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, format, std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Six significant digits: enough for a curve, a third of the bytes of a full double.
double round6(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

// True when the last byte of an existing, non-empty file is not a newline (a torn last line).
bool ends_without_newline(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f || f.tellg() <= 0) return false;
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  return c != '\n';
}

bool process_alive(const nlohmann::json& start) {
  if (!start.is_object() || !start.contains("pid") || !start["pid"].is_number_integer()) return false;
  if (start.value("host", std::string()) != host_name()) return false;
  const pid_t pid = (pid_t)start["pid"].get<int64_t>();
  if (pid <= 0 || pid == ::getpid()) return pid == ::getpid();
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

int64_t json_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return fallback;
  return j[key].get<int64_t>();
}

}  // namespace

// ---- writer ----

RunLedger::RunLedger(std::string path) : path_(std::move(path)) {
  run_id_ = utc_now("%Y%m%dT%H%M%SZ") + "-" + std::to_string((long long)::getpid());
}

void RunLedger::append(const char* record, nlohmann::json& line) {
  if (path_.empty()) return;
  line["record"] = record;
  line["run"] = run_id_;
  // A run killed mid-write leaves a line without its newline: start on a fresh line, so that torn
  // line stays one unreadable line instead of swallowing this record.
  const bool torn = ends_without_newline(path_);
  std::ofstream f(path_, std::ios::app);
  KILN_CHECK(f.good(), "runs.jsonl: cannot open ", path_, " for appending");
  if (torn) f << '\n';
  f << line.dump() << '\n';
  f.flush();
  KILN_CHECK(f.good(), "runs.jsonl: write to ", path_, " failed");
}

void RunLedger::start(nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["time"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  fields["pid"] = (int64_t)::getpid();
  fields["host"] = host_name();
  append("start", fields);
}

void RunLedger::step(nlohmann::json point) { append("step", point); }
void RunLedger::epoch(nlohmann::json fields) { append("epoch", fields); }

void RunLedger::finish(nlohmann::json fields, const std::string& status, const std::string& error) {
  KILN_CHECK(status == "ok" || status == "failed" || status == "refused",
             "runs.jsonl: run status must be ok, failed or refused, got '", status, "'");
  if (!fields.is_object()) fields = nlohmann::json::object();
  if (!fields.contains("time")) fields["time"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  fields["status"] = status;
  if (!error.empty()) fields["error"] = error;
  append("end", fields);
}

// ---- curve ----

CurveRecorder::CurveRecorder(int64_t every, Device device, bool loss_scale)
    : every_(every), device_(device), loss_scale_(loss_scale) {
  KILN_CHECK(every >= 1, "curve: a point every ", every, " steps (must be >= 1)");
  window_start_s_ = now_s();
}

std::optional<nlohmann::json> CurveRecorder::observe(const FitStep& fs) {
  if (fs.result) {
    loss_sum_ += fs.result->loss * (double)fs.result->samples;
    samples_ += fs.result->samples;
    skipped_ += fs.result->stepped ? 0 : 1;
  }
  const int64_t step = fs.global_step + 1;  // steps done, counting this one
  if (!first_ && step % every_ != 0) {
    last_step_end_s_ = now_s();
    return std::nullopt;
  }
  first_ = false;
  const double t = now_s(), dt = std::max(busy_s_ + t - window_start_s_, 1e-9);
  last_step_end_s_ = t;
  nlohmann::json p;
  p["step"] = step;
  p["epoch"] = fs.epoch + 1;
  p["loss"] = samples_ > 0 ? nlohmann::json(round6(loss_sum_ / (double)samples_)) : nlohmann::json();
  p["lr"] = round6(fs.lr);
  p["ips"] = round6((double)samples_ / dt);
  if (loss_scale_ && fs.result) {
    p["scale"] = fs.result->loss_scale;
    p["skipped"] = skipped_;
  }
  const std::vector<int64_t> live = live_tag_bytes(device_);
  if (!live.empty()) {
    nlohmann::json mem = nlohmann::json::object();
    for (int t = 0; t < kNumMemoryTags; ++t)
      if (live[(size_t)t] > 0) mem[tag_name((MemoryTag)t)] = live[(size_t)t];
    p["mem"] = mem;
  }
  loss_sum_ = 0;
  samples_ = 0;
  skipped_ = 0;
  busy_s_ = 0;
  window_start_s_ = t;
  return p;
}

void CurveRecorder::epoch_begin() {
  const double t = now_s();
  if (last_step_end_s_ >= window_start_s_) busy_s_ += last_step_end_s_ - window_start_s_;
  window_start_s_ = t;
}

// ---- reader ----

const nlohmann::json& LedgerRun::config() const {
  static const nlohmann::json none;
  if (end.is_object() && end.contains("config") && end["config"].is_object()) return end["config"];
  if (start.is_object() && start.contains("config") && start["config"].is_object()) return start["config"];
  return none;
}

LedgerContents parse_ledger(const std::string& text, const std::string& file) {
  LedgerContents out;
  std::map<std::string, size_t> by_id;
  auto run_for = [&](const std::string& id) -> LedgerRun& {
    auto it = by_id.find(id);
    if (it != by_id.end()) return out.runs[it->second];
    by_id[id] = out.runs.size();
    out.runs.emplace_back();
    out.runs.back().id = id;
    out.runs.back().file = file;
    return out.runs.back();
  };
  std::istringstream in(text);
  std::string line;
  for (size_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const std::string where = file + ":" + std::to_string(no) + ": ";
    if (j.is_discarded() || !j.is_object()) {
      out.warnings.push_back(where + "not a JSON object (a torn line from a killed run?), skipped");
      continue;
    }
    if (!j.contains("record")) {  // a ledger line from before records: one complete run
      LedgerRun& r = run_for("line-" + std::to_string(no) + "@" + file);
      r.status = "ok";
      r.end = j;
      if (j.contains("epochs") && j["epochs"].is_array())
        for (const auto& e : j["epochs"]) r.epochs.push_back(e);
      r.last_step = json_int(j, "steps", -1);
      continue;
    }
    if (!j["record"].is_string() || !j.contains("run") || !j["run"].is_string()) {
      out.warnings.push_back(where + "a record without a string \"record\" and \"run\", skipped");
      continue;
    }
    const std::string rec = j["record"].get<std::string>();
    LedgerRun& r = run_for(j["run"].get<std::string>());
    if (rec == "start") {
      r.start = j;
    } else if (rec == "step") {
      r.last_step = std::max(r.last_step, json_int(j, "step", -1));
      r.curve.push_back(std::move(j));
    } else if (rec == "epoch") {
      r.last_step = std::max(r.last_step, json_int(j, "steps", -1));
      r.epochs.push_back(j.contains("stats") ? j["stats"] : nlohmann::json::object());
    } else if (rec == "end") {
      r.end = j;
      r.status = j.value("status", std::string("ok"));
      if (j.contains("error") && j["error"].is_string()) r.error = j["error"].get<std::string>();
      r.last_step = std::max(r.last_step, json_int(j, "steps", -1));
      // The end line's epochs are the run's own list (epoch lines of a failed run may be fewer).
      if (j.contains("epochs") && j["epochs"].is_array() && !j["epochs"].empty()) {
        r.epochs.clear();
        for (const auto& e : j["epochs"]) r.epochs.push_back(e);
      }
    } else {
      out.warnings.push_back(where + "unknown record \"" + rec + "\", skipped");
    }
  }
  for (LedgerRun& r : out.runs)
    if (r.end.is_null()) r.status = process_alive(r.start) ? "running" : "killed";
  return out;
}

LedgerContents read_ledger(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "runs: cannot open ledger ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_ledger(ss.str(), path);
}

}  // namespace kiln::train
