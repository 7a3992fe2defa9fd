// `kiln runs` (the runs table of one or more ledgers), `kiln report` (the HTML training report)
// and kiln train's --report / --curve-every options (see cli_commands.h).
#include <filesystem>
#include <iostream>

#include "engine/core/error.h"
#include "engine/core/usage_error.h"
#include "tools/cli_commands.h"
#include "tools/report/run_report.h"
#include "tools/runs_table.h"

namespace kiln_cli {
namespace fs = std::filesystem;

CLI::App* add_runs_command(CLI::App& app, RunsOptions& o) {
  CLI::App* r = app.add_subcommand("runs", "list the runs of run ledgers (OUT/runs.jsonl) as one table");
  r->add_option("ledgers", o.paths, "OUT folders or runs.jsonl files (default: runs)");
  r->add_option("--sort", o.sort, "sort by a key: when, val_acc, images_per_s, time_s, measured_peak, ... "
                                  "(see --json for all keys)");
  r->add_flag("--desc", o.desc, "sort descending (largest first)");
  r->add_option("--where", o.where, "keep runs where KEY=VALUE (also != < <= > >=); repeatable, all must hold");
  r->add_flag("--json", o.json, "print the rows as a JSON array");
  r->add_flag("--csv", o.csv, "print the rows as CSV (every key)");
  return r;
}

namespace {

std::vector<nlohmann::json> selected_rows(const std::vector<kiln::train::LedgerRun>& runs, const RunsOptions& o) {
  std::vector<nlohmann::json> rows;
  for (const auto& r : runs) {
    nlohmann::json row = run_row(r);
    bool keep = true;
    for (const std::string& w : o.where) keep = keep && row_matches(row, w);
    if (keep) rows.push_back(std::move(row));
  }
  if (!o.sort.empty()) sort_rows(rows, o.sort, o.desc);
  return rows;
}

}  // namespace

int run_runs_command(const RunsOptions& o) {
  KILN_USAGE_CHECK(!(o.json && o.csv), "runs: --json and --csv are exclusive");
  std::vector<std::string> warnings;
  const auto runs = read_runs(o.paths.empty() ? std::vector<std::string>{"runs"} : o.paths, warnings);
  for (const std::string& w : warnings) std::cerr << "kiln runs: " << w << "\n";
  const std::vector<nlohmann::json> rows = selected_rows(runs, o);
  if (o.json) std::cout << nlohmann::json(rows).dump(1) << "\n";
  else if (o.csv) print_runs_csv(rows, std::cout);
  else print_runs_table(rows, std::cout);
  return 0;
}

CLI::App* add_report_command(CLI::App& app, ReportOptions& o) {
  CLI::App* r = app.add_subcommand(
      "report", "write the training report: one self-contained HTML page with the curves of the runs overlaid");
  r->add_option("ledgers", o.paths, "OUT folders or runs.jsonl files")->required();
  r->add_option("-o,--out", o.out, "HTML file to write")->required();
  r->add_option("--where", o.where, "only runs where KEY=VALUE (as kiln runs --where)");
  r->add_option("--title", o.title, "page title")->capture_default_str();
  return r;
}

int run_report_command(const ReportOptions& o) {
  std::vector<std::string> warnings;
  std::vector<kiln::train::LedgerRun> runs = read_runs(o.paths, warnings);
  for (const std::string& w : warnings) std::cerr << "kiln report: " << w << "\n";
  std::vector<kiln::train::LedgerRun> kept;
  for (auto& r : runs) {
    const nlohmann::json row = run_row(r);
    bool keep = true;
    for (const std::string& w : o.where) keep = keep && row_matches(row, w);
    if (keep) kept.push_back(std::move(r));
  }
  write_run_report(o.out, kept, o.title);
  std::cout << "report: " << o.out << " (" << kept.size() << " run" << (kept.size() == 1 ? "" : "s") << ")\n";
  return 0;
}

void add_train_report_options(CLI::App* train, kiln::RunConfig& c) {
  train->add_option("--report", c.report,
                    "write the training report (HTML: curves, memory timeline, the runs of OUT/runs.jsonl) "
                    "after each epoch and at the end");
  train->add_option("--curve-every", c.curve_every, "optimizer steps between curve points in OUT/runs.jsonl")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

kiln::LedgerHook train_report_hook(const kiln::RunConfig& c) {
  if (c.report.empty()) return {};
  KILN_USAGE_CHECK(!c.out.empty(), "train --report: the report is drawn from OUT/runs.jsonl, so --out must not be empty");
  const std::string path = c.report;
  return [path](const std::string& ledger, const std::string&) {
    std::vector<std::string> warnings;
    const auto runs = read_runs({ledger}, warnings);
    write_run_report(path, runs, "kiln training report: " + fs::path(ledger).parent_path().string());
  };
}

}  // namespace kiln_cli
