// Image data sets as lists of (path, label): an image folder (torchvision ImageFolder rules) and a
// CSV list. Only file system listing and text parsing here: no decoding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ImageSample {
  std::string path;
  int64_t label = 0;
};

struct ImageDataset {
  std::string root;                  // the folder or CSV it came from
  std::vector<std::string> classes;  // index = label
  std::vector<ImageSample> samples;
  bool labelled = true;              // false: images without labels (label -1, no classes): predict only
  size_t size() const { return samples.size(); }
  std::vector<int64_t> labels() const;
  std::vector<size_t> class_counts() const;  // one per class
};

// True for jpg/jpeg/png/bmp/gif/tga in any case.
bool is_image_extension(const std::string& path);

// root/<class>/**/<image>: classes are the sorted subfolder names, samples sorted by path within a
// class (as ImageFolder). Hidden entries (".name") are skipped. Throws kiln::Error naming the path
// when it is missing, not a folder, has no class folders or no images at all. A class folder
// with no images stays a class with 0 samples (unlike ImageFolder, which refuses), so `kiln data`
// can report it.
ImageDataset image_folder(const std::string& root);

// A folder holding train/ and val/ (or test/): the two splits, with the train split's classes
// (a class missing from train but present in eval is an error). Throws when there is no such split.
struct DatasetSplits {
  ImageDataset train, eval;
  std::string eval_name;  // "val" or "test"
};
bool has_split_folders(const std::string& root);
DatasetSplits image_folder_splits(const std::string& root);

// Images without labels, for `kiln predict`: every input is an image file or a glob pattern
// (* ? [...], expanded in sorted order; one matching nothing is an error), or, alone, a flat folder
// (images directly in it, no class subfolders). Labels -1, no classes, labelled = false.
ImageDataset unlabelled_images(const std::vector<std::string>& inputs);
// True when `path` is a folder holding images directly and no subfolder (a flat folder).
bool is_flat_image_folder(const std::string& path);
// True when `s` holds a glob character (* ? [).
bool has_glob_characters(const std::string& s);

// CSV "path,label" lines. Labels are all integers (classes "0".."max", max below 1000000) or all
// class names (sorted into indices). The first line is a header, and skipped, when its first field is path, file,
// filename or image (any case), or when its label is not an integer while every other label is.
// Relative paths resolve against the CSV's folder; quoted fields ("a,b.jpg") are supported; blank
// lines are skipped. Errors name the file and line. A list whose every line has one column is a
// list of paths without labels (labelled = false; a header path/file/filename/image is skipped).
ImageDataset csv_dataset(const std::string& csv_path);

// One CSV line's fields, trimmed of spaces and tabs; double quotes group ("a,b.jpg"), "" is a
// literal quote, a trailing \r is dropped. (Also the segmentation lists' parser.)
std::vector<std::string> csv_fields(const std::string& line);

// Folder or CSV, by what the path is.
ImageDataset open_image_dataset(const std::string& path);

}  // namespace kiln
