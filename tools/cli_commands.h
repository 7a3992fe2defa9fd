// Option registration for the `kiln` subcommands beyond train's core options: the image-pipeline
// and allocator options of train/predict, `kiln data`, `kiln export-images`, `kiln runs`, `kiln report`
// and train's --report / --curve-every (tools/cmd_runs.cpp). Kept out of
// main.cpp so the command's main stays a dispatcher.
#pragma once
#include <CLI/CLI.hpp>

#include "tools/cli_checks.h"
#include "engine/run/alloc_options.h"
#include "data/data_report.h"
#include "data/export_images.h"
#include "data/export_segmentation.h"
#include "data/image_options.h"
#include "engine/run/run_config.h"
#include "engine/run/run.h"

namespace kiln_cli {

// training = false (predict) leaves out --augment, --balance and --image-size schedules.
void add_image_options(CLI::App* cmd, kiln::ImageOptions& o, bool training);
// After parsing: fills implied values (--augment alone = rrc) and validates.
void finish_image_options(kiln::ImageOptions& o);
void add_alloc_options(CLI::App* cmd, kiln::AllocOptions& o);

CLI::App* add_data_command(CLI::App& app, kiln::DataReportOptions& o);
int run_data_command(kiln::DataReportOptions& o);

// export-images: the image-folder export (--data, --out) or, with --segmentation OUT, the
// Fashion-MNIST segmentation set.
struct ExportImagesCommand {
  kiln::ExportImagesOptions images;
  kiln::ExportSegmentationOptions segmentation;
};
CLI::App* add_export_images_command(CLI::App& app, ExportImagesCommand& c);
int run_export_images_command(ExportImagesCommand& c);

struct RunsOptions {
  std::vector<std::string> paths;  // OUT folders or runs.jsonl files (empty: runs)
  std::string sort;
  bool desc = false;
  std::vector<std::string> where;
  bool json = false, csv = false;
};
CLI::App* add_runs_command(CLI::App& app, RunsOptions& o);
int run_runs_command(const RunsOptions& o);

struct ReportOptions {
  std::vector<std::string> paths;
  std::string out;
  std::vector<std::string> where;
  std::string title = "kiln training report";
};
CLI::App* add_report_command(CLI::App& app, ReportOptions& o);
int run_report_command(const ReportOptions& o);

// kiln train --report PATH and --curve-every N; the hook rewrites the report after each ledger record
// of an epoch and at the end (empty without --report).
void add_train_report_options(CLI::App* train, kiln::RunConfig& c);
kiln::LedgerHook train_report_hook(const kiln::RunConfig& c);

}  // namespace kiln_cli
