// `kiln data PATH` as a library call: what is in an image data set before training on it (class
// counts and imbalance, image sizes and modes, every unreadable file with its reason, per-channel
// mean/std ready for --normalize, and a 3x3 contact sheet per class). Must not train or write
// anything but the report text and the contact sheets. Segmentation data (images/ + masks/, or an
// image,mask CSV) gets data/segmentation_report.h's report instead.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln {

struct DataReportOptions {
  std::string path;                          // image folder (optionally with train/ + val|test/) or CSV
  std::string out_dir = "kiln_data_report";  // contact sheets go here ("" = none)
  int workers = 0;                           // decode threads (0 = half the cores, >= 1)
  uint64_t seed = 0;                         // which samples the contact sheets show
  double imbalance_ratio = 3.0;              // warn when largest / smallest class count >= this
  // 0: the statistics are of full-size decodes, as --normalize auto's (data/channel_stats.h's
  // normalize_statistics); > 0 decodes JPEGs down to >= this shorter side (faster, other numbers).
  int stats_min_side = 0;
  int tile = 160;            // contact-sheet tile size (pixels)
  std::ostream* out = nullptr;  // report text (default std::cout)
  std::ostream* err = nullptr;  // "kiln: error: data: ..." when the set cannot be opened (default std::cerr)
};

// Returns 0 when the data set could be listed (whatever was found in it), 1 when it could not
// (missing path, no classes, no images): then one line naming the path says why.
int run_data_report(const DataReportOptions& opt);

}  // namespace kiln
