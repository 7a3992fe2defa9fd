// `kiln data PATH [--out DIR]`: the data set report of data/data_report.h on the command line.
#include <iostream>

#include "tools/cli_commands.h"

namespace kiln_cli {

CLI::App* add_data_command(CLI::App& app, kiln::DataReportOptions& o) {
  CLI::App* d = app.add_subcommand(
      "data", "report on an image folder or CSV list: classes, sizes, bad files, mean/std, contact sheets; on "
      "segmentation data (images/ + masks/, or an image,mask CSV): class pixel frequencies and bad pairs");
  d->add_option("path", o.path, "image folder (optionally with train/ and val/ or test/), CSV list, or segmentation folder / CSV")->required();
  d->add_option("--out", o.out_dir, "folder for the contact sheets (\"\" for none)")->capture_default_str();
  d->add_option("--workers", o.workers, "decode threads (default: half the cores)")->check(kiln_cli::non_negative);
  d->add_option("--seed", o.seed, "which samples the contact sheets show")->capture_default_str();
  return d;
}

int run_data_command(kiln::DataReportOptions& o) {
  o.out = &std::cout;
  return kiln::run_data_report(o);
}

}  // namespace kiln_cli
