// Segmentation data sets as lists of (image, mask) paths: a folder with images/ and masks/ matched
// by file stem (images any format the loader reads, masks PNG), or a CSV with the header
// `image,mask` (paths relative to the CSV's folder); a folder may hold train/ and val/ (or test/)
// splits, each such a folder; class names from an optional classes.txt (one per line). Only file
// system listing and text parsing here: no decoding (the class count scan is segmentation_scan.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct SegmentationSample {
  std::string image, mask;  // mask empty: no mask file has the image's stem (a bad sample)
};

struct SegmentationDataset {
  std::string root;                  // the folder or CSV it came from
  std::vector<SegmentationSample> samples;
  std::vector<std::string> classes;  // from classes.txt; empty when there is none
  std::string classes_file;          // where they came from ("" = none)
  std::vector<std::string> orphan_masks;  // masks/ files no image has the stem of (listed by `kiln data`)
  size_t size() const { return samples.size(); }
};

// A folder with images/ and masks/ folders.
bool is_segmentation_folder(const std::string& path);
// A CSV file whose first line is the header image,mask (any case, spaces allowed).
bool is_segmentation_csv(const std::string& path);

// folder/images/**/<stem>.<ext> paired with folder/masks/**/<stem>.png (the same relative folder
// and stem), sorted by image path; hidden entries skipped. An image without a mask is kept with an
// empty mask path (reported as a bad sample by the loader); two images or two masks with the same
// relative stem are an error naming both. Throws kiln::Error when images/ has no image.
SegmentationDataset segmentation_folder(const std::string& root);
// CSV image,mask: relative paths resolve against the CSV's folder; errors name the file and line.
SegmentationDataset segmentation_csv(const std::string& csv_path);
// Folder or CSV, by what the path is. classes.txt is looked for beside the CSV or in the folder
// (and, for a split folder, in its parent).
SegmentationDataset open_segmentation_dataset(const std::string& path);

// A folder whose train/ is a segmentation folder, with val/ or test/ beside it (eval_name says
// which; eval empty when neither exists).
struct SegmentationSplits {
  SegmentationDataset train, eval;
  std::string eval_name;
};
bool has_segmentation_splits(const std::string& root);
SegmentationSplits segmentation_folder_splits(const std::string& root);

// classes.txt: one name per line (trailing spaces and \r dropped, blank lines an error naming the
// line); throws naming the file.
std::vector<std::string> read_class_names(const std::string& path);

}  // namespace kiln
