// Segmentation pair listing (see segmentation_dataset.h).
#include "data/segmentation_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/dataset.h"
#include "engine/core/error.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// Relative path without extension ("sub/a" for images/sub/a.jpg) -> full path, for one tree.
std::map<std::string, std::string> files_by_stem(const fs::path& dir, bool images, const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
  KILN_CHECK(!ec, "segmentation folder ", root, ": cannot list ", dir.string(), " (", ec.message(), ")");
  for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    if (hidden(p)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    const bool take = images ? is_image_extension(p.string()) : lower(p.extension().string()) == ".png";
    if (!take) continue;
    const std::string key = (fs::relative(p, dir, ec).parent_path() / p.stem()).generic_string();
    auto ins = out.emplace(key, p.string());
    KILN_CHECK(ins.second, "segmentation folder ", root, ": two ", images ? "images" : "masks", " with the stem '", key,
               "' (", ins.first->second, " and ", p.string(), "): which one pairs is ambiguous");
  }
  return out;
}

// classes.txt beside the data (or in the parent of a split folder), "" when none.
std::string find_classes_file(const fs::path& dir) {
  std::error_code ec;
  for (const fs::path& d : {dir, dir.parent_path()}) {
    if (d.empty()) continue;
    if (fs::is_regular_file(d / "classes.txt", ec)) return (d / "classes.txt").string();
  }
  return "";
}

void attach_classes(SegmentationDataset& ds, const fs::path& dir) {
  ds.classes_file = find_classes_file(dir);
  if (!ds.classes_file.empty()) ds.classes = read_class_names(ds.classes_file);
}

}  // namespace

std::vector<std::string> read_class_names(const std::string& path) {
  std::ifstream in(path);
  KILN_CHECK(in.good(), "classes file ", path, ": cannot open");
  std::vector<std::string> names;
  std::string line;
  int ln = 0, blank_at = 0;
  while (std::getline(in, line)) {
    ++ln;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty()) {
      if (!blank_at) blank_at = ln;
      continue;
    }
    KILN_CHECK(!blank_at, "classes file ", path, ":", blank_at, ": blank line before the name on line ", ln,
               " (one class name per line, in index order)");
    names.push_back(line);
  }
  KILN_CHECK(!names.empty(), "classes file ", path, ": no class names");
  KILN_CHECK(names.size() <= 256, "classes file ", path, ": ", names.size(),
             " names; masks are 8-bit, so at most 255 classes (255 = ignore)");
  return names;
}

bool is_segmentation_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(fs::path(path) / "images", ec) && fs::is_directory(fs::path(path) / "masks", ec);
}

bool is_segmentation_csv(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string line(4096, '\0');  // the header only: a binary file with no newline is not read whole
  in.read(&line[0], (std::streamsize)line.size());
  line.resize((size_t)in.gcount());
  line = line.substr(0, line.find('\n'));
  if (line.size() >= 3 && (unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB &&
      (unsigned char)line[2] == 0xBF)
    line = line.substr(3);  // UTF-8 byte order mark
  const std::vector<std::string> f = csv_fields(line);
  return f.size() == 2 && lower(f[0]) == "image" && lower(f[1]) == "mask";
}

SegmentationDataset segmentation_folder(const std::string& root) {
  KILN_CHECK(is_segmentation_folder(root), "segmentation folder ", root, ": needs images/ and masks/ folders");
  const fs::path r(root);
  const auto images = files_by_stem(r / "images", true, root);
  const auto masks = files_by_stem(r / "masks", false, root);
  KILN_CHECK(!images.empty(), "segmentation folder ", root, ": no images in ", (r / "images").string(),
             " (jpg, jpeg, png, bmp, gif, tga)");
  SegmentationDataset ds;
  ds.root = root;
  for (const auto& kv : images) {  // map order: sorted by relative stem
    auto m = masks.find(kv.first);
    ds.samples.push_back({kv.second, m == masks.end() ? std::string() : m->second});
  }
  for (const auto& kv : masks)
    if (!images.count(kv.first)) ds.orphan_masks.push_back(kv.second);
  attach_classes(ds, r);
  return ds;
}

SegmentationDataset segmentation_csv(const std::string& csv_path) {
  KILN_CHECK(is_segmentation_csv(csv_path), "segmentation list ", csv_path,
             ": not a CSV whose first line is the header image,mask");
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);  // header
  SegmentationDataset ds;
  ds.root = csv_path;
  const fs::path base = fs::path(csv_path).parent_path();
  int ln = 1;
  while (std::getline(in, line)) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> f = csv_fields(line);
    KILN_CHECK(f.size() == 2 && !f[0].empty() && !f[1].empty(), "segmentation list ", csv_path, ":", ln, ": ",
               f.size(), " field(s); expected image,mask (two non-empty paths)");
    auto resolve = [&](const std::string& p) {
      const fs::path q(p);
      return (q.is_absolute() ? q : base / q).string();
    };
    ds.samples.push_back({resolve(f[0]), resolve(f[1])});
  }
  KILN_CHECK(!ds.samples.empty(), "segmentation list ", csv_path, ": only a header, no samples");
  attach_classes(ds, base.empty() ? fs::path(".") : base);
  return ds;
}

SegmentationDataset open_segmentation_dataset(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return segmentation_folder(path);
  return segmentation_csv(path);
}

bool has_segmentation_splits(const std::string& root) {
  return is_segmentation_folder((fs::path(root) / "train").string());
}

SegmentationSplits segmentation_folder_splits(const std::string& root) {
  KILN_CHECK(has_segmentation_splits(root), "segmentation folder ", root, ": no train/ with images/ and masks/");
  SegmentationSplits s;
  s.train = segmentation_folder((fs::path(root) / "train").string());
  for (const char* name : {"val", "test"}) {
    const std::string p = (fs::path(root) / name).string();
    if (is_segmentation_folder(p)) {
      s.eval = segmentation_folder(p);
      s.eval_name = name;
      break;
    }
  }
  return s;
}

}  // namespace kiln
