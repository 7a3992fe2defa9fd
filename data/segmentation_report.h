// `kiln data PATH` on segmentation data (data/segmentation_source.h's is_segmentation_data): per
// split, the class pixel frequencies (pixels and share per mask value over the usable pairs, 255 =
// ignore listed apart), image sizes and modes, every bad pair with its reason (missing mask,
// unreadable image or mask, image/mask size mismatch, a class past classes.txt), masks without an
// image, and the training split's per-channel mean/std for --normalize. Must not train or write
// files (no contact sheets for segmentation data).
#pragma once

#include "data/data_report.h"

namespace kiln {

// Same contract as run_data_report: 0 when the data set could be listed, 1 (one line on opt.err)
// when not.
int run_segmentation_report(const DataReportOptions& opt);

}  // namespace kiln
