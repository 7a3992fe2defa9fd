// `kiln export-images`: writes an array data set (IDX folder or x.npy + y.npy) as a JPEG image
// folder, OUT/train/<class>/<index>.jpg and OUT/test/<class>/<index>.jpg (the IDX t10k split or
// --val), so the image pipeline (decode, transforms, loader) trains on the same data the array
// path does. Class folders are the zero-padded label ("0".."9", "00".."99"), so their sorted order
// is the label order. Grayscale data gives grayscale JPEGs. A marker file OUT/.kiln_export
// (JSON, written last) says the export is complete and what it was made from: the data and --val
// folders (absolute), the names and sizes of their files, and the JPEG quality. A later export into
// OUT asking for exactly that does nothing; asking for anything else exports again when OUT holds
// only kiln's own export (.kiln_export, train/ and test/ of class folders of NNNNNN.jpg), and
// otherwise is refused with one error naming each difference. Must not train.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

struct ExportImagesOptions {
  std::string data, val, out;
  int quality = 95;
  bool force = false;  // export again even when OUT/.kiln_export exists
};

struct ExportImagesResult {
  bool skipped = false;  // the marker was there and says the same data, split and quality
  std::string replaced;  // exported again over an export of other settings: the differences
  int64_t train = 0, test = 0, classes = 0;
  double seconds = 0;
};

ExportImagesResult export_images(const ExportImagesOptions& o);

}  // namespace kiln
