// Option registration for the `kiln` subcommands beyond train's core options: the image-pipeline
// and allocator options of train/predict, `kiln data` and `kiln export-images`. Kept out of
// main.cpp so the command's main stays a dispatcher.
#pragma once
#include <CLI/CLI.hpp>

#include "tools/cli_checks.h"
#include "tools/alloc_flags.h"
#include "data/data_report.h"
#include "data/export_images.h"
#include "data/image_options.h"

namespace kiln_cli {

// training = false (predict) leaves out --augment, --balance and --image-size schedules.
void add_image_options(CLI::App* cmd, kiln::ImageOptions& o, bool training);
// After parsing: fills implied values (--augment alone = rrc) and validates.
void finish_image_options(kiln::ImageOptions& o);
void add_alloc_options(CLI::App* cmd, kiln::AllocOptions& o);

CLI::App* add_data_command(CLI::App& app, kiln::DataReportOptions& o);
int run_data_command(kiln::DataReportOptions& o);

CLI::App* add_export_images_command(CLI::App& app, kiln::ExportImagesOptions& o);
int run_export_images_command(const kiln::ExportImagesOptions& o);

}  // namespace kiln_cli
