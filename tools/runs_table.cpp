// The runs table (see runs_table.h).
#include "tools/runs_table.h"

#include "engine/core/percent.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/core/error.h"

namespace kiln_cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const json& field(const json& j, const char* key) {
  static const json none;
  return j.is_object() && j.contains(key) ? j[key] : none;
}

// The first non-null of the end line's and the start line's `key`.
const json& either(const kiln::train::LedgerRun& r, const char* key) {
  const json& e = field(r.end, key);
  return e.is_null() ? field(r.start, key) : e;
}

std::string base_name(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string b = fs::path(p).filename().string();
  return b.empty() ? p : b;
}

std::string text_of(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

const std::vector<std::string>& run_row_keys() {
  static const std::vector<std::string> keys = {
      "when",       "run",       "status",       "model",          "data",          "image_size",
      "batch",      "accum",     "optimizer",    "lr",             "amp",           "amp_dtype",     "recompute",
      "epochs",     "epochs_planned", "train_acc", "val_acc",      "val_correct",   "val_total",
      "task",       "val_miou",
      "time_s",     "images_per_s",
      "peak_allocated", "peak_reserved", "plan_peak_allocated", "plan_peak_reserved", "predicted_peak",
      "measured_peak", "last_step", "error",     "file"};
  return keys;
}

json run_row(const kiln::train::LedgerRun& r) {
  const json& c = r.config();
  json row = json::object();
  for (const std::string& k : run_row_keys()) row[k] = nullptr;
  const json& when = field(r.start, "time");
  row["when"] = when.is_null() ? field(r.end, "time") : when;
  row["run"] = r.id;
  row["status"] = r.status;
  row["model"] = field(c, "model");
  if (field(c, "data").is_string()) row["data"] = base_name(c["data"].get<std::string>());
  row["image_size"] = either(r, "image_size");
  row["batch"] = field(c, "batch");
  row["accum"] = field(c, "accum");
  row["optimizer"] = field(c, "optimizer");
  row["lr"] = field(c, "lr");
  row["amp"] = field(c, "amp");
  if (row["amp"] == true) row["amp_dtype"] = field(c, "amp_dtype").is_string() ? field(c, "amp_dtype") : json("f16");
  else row["amp_dtype"] = nullptr;
  const json& ck = field(c, "checkpoint");
  const json& segments = field(either(r, "memory"), "checkpoint_segments");
  if (ck.is_string()) {
    std::string rc = ck.get<std::string>();
    if (rc == "auto" && segments.is_number()) rc += ":" + segments.dump();
    row["recompute"] = rc;
  }
  int64_t done = -1;
  double best_val = -1, best_miou = -1;
  json best_val_counts;
  bool have_val = false, have_miou = false;
  double secs = 0, ips = 0;
  int64_t peak = -1;
  for (const json& e : r.epochs) {
    if (field(e, "epoch").is_number()) done = std::max(done, e["epoch"].get<int64_t>());
    if (field(e, "val_acc").is_number()) {
      if (!have_val || e["val_acc"].get<double>() > best_val) {
        best_val = e["val_acc"].get<double>();
        // The counts of the best epoch (older ledgers have none): the table's percentage is theirs.
        best_val_counts = field(e, "val_total").is_number() ? json::array({e["val_correct"], e["val_total"]}) : json();
      }
      have_val = true;
    }
    if (field(e, "val_miou").is_number()) {  // segmentation runs (kiln train --task segment)
      best_miou = have_miou ? std::max(best_miou, e["val_miou"].get<double>()) : e["val_miou"].get<double>();
      have_miou = true;
    }
    if (field(e, "seconds").is_number()) secs += e["seconds"].get<double>();
    if (field(e, "images_per_s").is_number()) ips += e["images_per_s"].get<double>();
    if (field(e, "peak_memory_bytes").is_number()) peak = std::max(peak, e["peak_memory_bytes"].get<int64_t>());
  }
  if (done < 0 && !r.epochs.empty()) done = (int64_t)r.epochs.size();
  row["epochs"] = done >= 0 ? json(done) : json(0);
  row["epochs_planned"] = field(c, "epochs");
  if (!r.epochs.empty()) row["train_acc"] = field(r.epochs.back(), "train_acc");
  if (have_val) row["val_acc"] = best_val;
  if (have_val && best_val_counts.is_array()) row["val_correct"] = best_val_counts[0], row["val_total"] = best_val_counts[1];
  row["task"] = field(c, "task").is_string() ? field(c, "task") : json("classify");  // older ledgers: classify
  if (have_miou) row["val_miou"] = best_miou;
  const json& wall = field(r.end, "wall_s");
  row["time_s"] = wall.is_number() ? wall : (r.epochs.empty() ? json() : json(secs));
  const json& run_ips = field(r.end, "images_per_s");
  row["images_per_s"] =
      run_ips.is_number() ? run_ips : (r.epochs.empty() ? json() : json(ips / (double)r.epochs.size()));
  // The run's two memory figures, whole run, measured and planned (engine/run/run_peaks.h, run_plan.h); older
  // ledgers: one step's prediction and the epochs' allocated peaks.
  row["peak_allocated"] = field(r.end, "peak_allocated");
  row["peak_reserved"] = field(r.end, "peak_reserved");
  row["plan_peak_allocated"] = field(field(r.end, "plan"), "peak_allocated");
  row["plan_peak_reserved"] = field(field(r.end, "plan"), "peak_reserved");
  row["predicted_peak"] = field(field(either(r, "memory"), "predicted"), "peak_allocated");
  const json& measured = field(r.end, "peak_memory_bytes");
  row["measured_peak"] = measured.is_number() ? measured : (peak >= 0 ? json(peak) : json());
  row["last_step"] = r.last_step >= 0 ? json(r.last_step) : json();
  if (!r.error.empty()) row["error"] = r.error;
  row["file"] = r.file;
  return row;
}

std::vector<kiln::train::LedgerRun> read_runs(const std::vector<std::string>& paths,
                                              std::vector<std::string>& warnings) {
  std::vector<kiln::train::LedgerRun> runs;
  for (const std::string& p : paths) {
    const std::string file = fs::is_directory(p) ? (fs::path(p) / "runs.jsonl").string() : p;
    KILN_CHECK(fs::exists(file), "runs: no ledger at ", file,
               fs::is_directory(p) ? " (has kiln train --out " + p + " run there?)" : std::string());
    kiln::train::LedgerContents c = kiln::train::read_ledger(file);
    for (auto& w : c.warnings) warnings.push_back(std::move(w));
    for (auto& r : c.runs) runs.push_back(std::move(r));
  }
  return runs;
}

bool row_matches(const json& row, const std::string& filter) {
  static const char* ops[] = {"!=", "<=", ">=", "=", "<", ">"};
  size_t at = std::string::npos, len = 0;
  std::string op;
  for (const char* o : ops) {
    const size_t p = filter.find(o);
    if (p != std::string::npos && (at == std::string::npos || p < at || (p == at && std::strlen(o) > len))) {
      at = p;
      len = std::strlen(o);
      op = o;
    }
  }
  KILN_CHECK(at != std::string::npos && at > 0, "runs --where: '", filter,
             "' is not KEY=VALUE (also KEY!=VALUE, KEY<VALUE, KEY<=VALUE, KEY>VALUE, KEY>=VALUE)");
  const std::string key = filter.substr(0, at), want = filter.substr(at + len);
  if (!row.contains(key)) {
    std::string keys;
    for (const auto& k : run_row_keys()) keys += (keys.empty() ? "" : " ") + k;
    KILN_CHECK(false, "runs --where: unknown key '", key, "' (keys: ", keys, ")");
  }
  const json& v = row[key];
  char* end = nullptr;
  const double want_num = std::strtod(want.c_str(), &end);
  const bool numeric = !want.empty() && end && *end == '\0' && v.is_number();
  int cmp;
  if (numeric) {
    const double have = v.get<double>();
    cmp = have < want_num ? -1 : have > want_num ? 1 : 0;
  } else {
    if (v.is_null()) return op == "!=";
    const std::string have = text_of(v);
    if (op != "=" && op != "!=")
      KILN_CHECK(false, "runs --where: '", filter, "': ", key, " is '", have, "', not a number to compare with ",
                 want);
    cmp = have == want ? 0 : 1;
  }
  if (op == "=") return cmp == 0;
  if (op == "!=") return cmp != 0;
  if (v.is_null()) return false;
  if (op == "<") return cmp < 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp >= 0;
}

void sort_rows(std::vector<json>& rows, const std::string& key, bool descending) {
  KILN_CHECK(std::find(run_row_keys().begin(), run_row_keys().end(), key) != run_row_keys().end(),
             "runs --sort: unknown key '", key, "'");
  std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
    const json &x = a[key], &y = b[key];
    if (x.is_null() || y.is_null()) return !x.is_null() && y.is_null();  // nulls last
    if (x.is_number() && y.is_number())
      return descending ? x.get<double>() > y.get<double>() : x.get<double>() < y.get<double>();
    const std::string sx = text_of(x), sy = text_of(y);
    return descending ? sx > sy : sx < sy;
  });
}

std::string format_mib(const json& bytes) {
  if (!bytes.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes.get<double>() / (1 << 20));
  return buf;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The cells of the text table (and the HTML table of kiln report).
std::vector<std::string> cells(const json& r) {
  auto s = [](const json& v) { return v.is_null() ? std::string("-") : text_of(v); };
  std::string status = s(r["status"]);
  if ((status == "killed" || status == "running") && r["last_step"].is_number())
    status += " @" + r["last_step"].dump();
  std::string when = s(r["when"]);
  if (when.size() >= 16 && when[10] == 'T') when = when.substr(0, 10) + " " + when.substr(11, 5);
  std::string batch = s(r["batch"]);
  if (r["accum"].is_number() && r["accum"].get<int64_t>() > 1) batch += "x" + r["accum"].dump();
  std::string opt = s(r["optimizer"]);
  if (r["lr"].is_number()) opt += " " + fmt("%g", r["lr"].get<double>());
  std::string epochs = s(r["epochs"]);
  if (r["epochs_planned"].is_number()) epochs += "/" + r["epochs_planned"].dump();
  return {when,
          s(r["model"]),
          s(r["data"]),
          s(r["image_size"]),
          batch,
          opt,
          r["amp"].is_boolean() ? (!r["amp"].get<bool>() ? "f32" : r["amp_dtype"] == "bf16" ? "amp bf16" : "amp") : "-",
          s(r["recompute"]),
          epochs,
          r["val_total"].is_number() ? kiln::percent_text(r["val_correct"].get<int64_t>(), r["val_total"].get<int64_t>())
          : r["val_acc"].is_number() ? kiln::percent_text(r["val_acc"].get<double>())
                                     : "-",
          r["val_miou"].is_number() ? kiln::percent_text(r["val_miou"].get<double>()) : "-",
          r["time_s"].is_number() ? fmt("%.1f s", r["time_s"].get<double>()) : "-",
          r["images_per_s"].is_number() ? fmt("%.0f", r["images_per_s"].get<double>()) : "-",
          // "measured / planned" MiB; an older ledger: its measured epoch peak and one step's prediction
          r["peak_allocated"].is_number()
              ? format_mib(r["peak_allocated"]) + " / " + format_mib(r["plan_peak_allocated"])
              : format_mib(r["measured_peak"]) + " / " + format_mib(r["predicted_peak"]),
          r["peak_reserved"].is_number() ? format_mib(r["peak_reserved"]) + " / " + format_mib(r["plan_peak_reserved"])
                                         : std::string("-"),
          status};
}

}  // namespace

const std::vector<std::string>& table_headers() {
  static const std::vector<std::string> h = {"when",    "model",     "data",  "size",   "batch",
                                             "opt lr",  "prec",      "recompute", "epochs", "best val",
                                             "best mIoU", "time",  "img/s",  "peak allocated", "peak reserved", "status"};
  return h;
}

std::vector<std::string> table_cells(const json& row) { return cells(row); }

void print_runs_table(const std::vector<json>& rows, std::ostream& out) {
  const std::vector<std::string>& h = table_headers();
  std::vector<std::vector<std::string>> all;
  all.push_back(h);
  for (const json& r : rows) all.push_back(cells(r));
  std::vector<size_t> w(h.size(), 0);
  for (const auto& line : all)
    for (size_t i = 0; i < line.size(); ++i) w[i] = std::max(w[i], line[i].size());
  for (const auto& line : all) {
    std::string s;
    for (size_t i = 0; i < line.size(); ++i) {
      s += line[i];
      if (i + 1 < line.size()) s += std::string(w[i] - line[i].size() + 2, ' ');
    }
    out << s << "\n";
  }
  for (const json& r : rows)
    if (r["error"].is_string())
      out << (r["status"] == "refused" ? "refused " : "failed ") << r["run"].get<std::string>() << ": "
          << r["error"].get<std::string>() << "\n";
}

void print_runs_csv(const std::vector<json>& rows, std::ostream& out) {
  const auto& keys = run_row_keys();
  auto quote = [](const std::string& v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (size_t i = 0; i < keys.size(); ++i) out << (i ? "," : "") << keys[i];
  out << "\n";
  for (const json& r : rows) {
    for (size_t i = 0; i < keys.size(); ++i) out << (i ? "," : "") << quote(text_of(r[keys[i]]));
    out << "\n";
  }
}

}  // namespace kiln_cli
