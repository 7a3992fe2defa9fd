// Image folder and CSV data sets (see dataset.h).
#include "data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/core/error.h"

namespace fs = std::filesystem;

namespace kiln {

std::vector<int64_t> ImageDataset::labels() const {
  std::vector<int64_t> l(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) l[i] = samples[i].label;
  return l;
}

std::vector<size_t> ImageDataset::class_counts() const {
  std::vector<size_t> c(classes.size(), 0);
  for (const auto& s : samples)
    if (s.label >= 0 && (size_t)s.label < c.size()) ++c[(size_t)s.label];
  return c;
}

static std::string lower(std::string s) {
  for (auto& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

bool is_image_extension(const std::string& path) {
  std::string ext = lower(fs::path(path).extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp" || ext == ".gif" || ext == ".tga";
}

static bool hidden(const fs::path& p) {
  std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

ImageDataset image_folder(const std::string& root) {
  std::error_code ec;
  KILN_CHECK(fs::exists(root, ec), "image folder ", root, ": does not exist");
  KILN_CHECK(fs::is_directory(root, ec), "image folder ", root, ": not a folder");
  ImageDataset ds;
  ds.root = root;
  for (const auto& e : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink, ec))
    if (e.is_directory() && !hidden(e.path())) ds.classes.push_back(e.path().filename().string());
  KILN_CHECK(!ec, "image folder ", root, ": cannot list (", ec.message(), ")");
  std::sort(ds.classes.begin(), ds.classes.end());
  KILN_CHECK(!ds.classes.empty(), "image folder ", root, ": no class subfolders (expected ", root,
             "/<class>/<image>)");
  for (size_t ci = 0; ci < ds.classes.size(); ++ci) {
    std::vector<std::string> files;
    fs::path dir = fs::path(root) / ds.classes[ci];
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_image_extension(it->path().string())) files.push_back(it->path().string());
    }
    KILN_CHECK(!ec, "image folder ", dir.string(), ": cannot list (", ec.message(), ")");
    std::sort(files.begin(), files.end());
    for (auto& f : files) ds.samples.push_back({std::move(f), (int64_t)ci});
  }
  KILN_CHECK(!ds.samples.empty(), "image folder ", root,
             ": no images (looked for .jpg .jpeg .png .bmp .gif .tga in the class subfolders)");
  return ds;
}

bool has_split_folders(const std::string& root) {
  std::error_code ec;
  fs::path r(root);
  return fs::is_directory(r / "train", ec) && (fs::is_directory(r / "val", ec) || fs::is_directory(r / "test", ec));
}

DatasetSplits image_folder_splits(const std::string& root) {
  KILN_CHECK(has_split_folders(root), "image folder ", root, ": no train/ and val/ (or test/) subfolders");
  DatasetSplits s;
  std::error_code ec;
  s.eval_name = fs::is_directory(fs::path(root) / "val", ec) ? "val" : "test";
  s.train = image_folder((fs::path(root) / "train").string());
  ImageDataset ev = image_folder((fs::path(root) / s.eval_name).string());
  // Eval labels must use the train split's class indices.
  std::map<std::string, int64_t> idx;
  for (size_t i = 0; i < s.train.classes.size(); ++i) idx[s.train.classes[i]] = (int64_t)i;
  for (auto& smp : ev.samples) {
    const std::string& cname = ev.classes[(size_t)smp.label];
    auto it = idx.find(cname);
    KILN_CHECK(it != idx.end(), "image folder ", root, ": class '", cname, "' is in ", s.eval_name,
               "/ but not in train/");
    smp.label = it->second;
  }
  ev.classes = s.train.classes;
  s.eval = std::move(ev);
  return s;
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool q = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (q) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (ch == '"') q = false;
      else out.back() += ch;
    } else if (ch == '"') {
      q = true;
    } else if (ch == ',') {
      out.emplace_back();
    } else if (ch != '\r') {
      out.back() += ch;
    }
  }
  for (auto& f : out) {
    size_t a = f.find_first_not_of(" \t"), b = f.find_last_not_of(" \t");
    f = a == std::string::npos ? std::string() : f.substr(a, b - a + 1);
  }
  return out;
}

static bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit((unsigned char)s[j])) return false;
  try {
    *v = std::stoll(s);
  } catch (...) {
    return false;
  }
  return true;
}

static constexpr int64_t kMaxCsvClasses = 1000000;

// A label that reads as a number but is no integer ("0.0", "1e3", "-2.5"): neither a class index
// nor a name kiln would take silently.
static bool non_integer_number(const std::string& s) {
  int64_t v;
  if (parse_int(s, &v)) return false;
  if (s.empty() || !std::any_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The label rule (README "--data"): every label an integer -> class indices 0..max; otherwise
// every label a name -> the sorted names are the classes. A mixture, or a number that is not an
// integer, is an error naming the line. Every line has exactly two columns, path and label.
ImageDataset csv_dataset(const std::string& csv_path) {
  std::ifstream in(csv_path);
  KILN_CHECK(in.good(), "csv data set ", csv_path, ": cannot open");
  struct Row { std::string path, label; int line; };
  std::vector<Row> rows;
  std::string line;
  int ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto f = csv_fields(line);
    KILN_CHECK(f.size() >= 2 && !f[0].empty(), "csv data set ", csv_path, ":", ln,
               ": expected 'path,label', got '", line, "'");
    KILN_CHECK(f.size() == 2, "csv data set ", csv_path, ":", ln, ": ", f.size(),
               " columns, expected 2 (path,label): '", line, "'");
    rows.push_back({f[0], f[1], ln});
  }
  KILN_CHECK(!rows.empty(), "csv data set ", csv_path, ": no rows");
  int64_t v;
  const std::string h0 = lower(rows[0].path), h1 = lower(rows[0].label);
  bool header = h0 == "path" || h0 == "file" || h0 == "filename" || h0 == "image" || h1 == "label" ||
                h1 == "class" || h1 == "target";
  if (!header && !parse_int(rows[0].label, &v) && rows.size() > 1) {
    // A first line whose label alone is no integer is a header ("img,y") unless its path is a file:
    // then it is a sample whose name label mixes with the integers below (an error).
    std::error_code ec;
    const fs::path p0(rows[0].path);
    const bool is_file = fs::is_regular_file(p0.is_absolute() ? p0 : fs::path(csv_path).parent_path() / p0, ec);
    header = !is_file &&
             std::all_of(rows.begin() + 1, rows.end(), [&](const Row& r) { return parse_int(r.label, &v); });
  }
  if (header) rows.erase(rows.begin());
  KILN_CHECK(!rows.empty(), "csv data set ", csv_path, ": only a header, no samples");
  for (const Row& r : rows)
    KILN_CHECK(!non_integer_number(r.label), "csv data set ", csv_path, ":", r.line, ": label '", r.label,
               "' is a number but not an integer (labels are class indices 0, 1, ... or names, one kind for the "
               "whole list)");
  const bool numeric = parse_int(rows[0].label, &v);
  for (const Row& r : rows)
    KILN_CHECK(parse_int(r.label, &v) == numeric, "csv data set ", csv_path, ":", r.line, ": label '", r.label,
               "' is ", numeric ? "a name" : "an integer", " but line ", rows[0].line, "'s label '", rows[0].label,
               "' is ", numeric ? "an integer" : "a name",
               " (labels are class indices 0, 1, ... or names, one kind for the whole list)");
  ImageDataset ds;
  ds.root = csv_path;
  fs::path base = fs::path(csv_path).parent_path();
  std::map<std::string, int64_t> names;
  if (!numeric) {
    for (const auto& r : rows) names[r.label] = 0;
    int64_t i = 0;
    for (auto& kv : names) {
      kv.second = i++;
      ds.classes.push_back(kv.first);
    }
  }
  int64_t max_label = -1;
  for (const auto& r : rows) {
    ImageSample s;
    fs::path p(r.path);
    s.path = p.is_absolute() ? p.string() : (base / p).string();
    if (numeric) {
      parse_int(r.label, &s.label);
      KILN_CHECK(s.label >= 0, "csv data set ", csv_path, ":", r.line, ": negative label ", s.label);
      // Integer labels name classes 0..max: a huge one would make that many classes.
      KILN_CHECK(s.label < kMaxCsvClasses, "csv data set ", csv_path, ":", r.line, ": label ", s.label,
                 " is too large (integer labels are class indices, at most ", kMaxCsvClasses - 1, ")");
      max_label = std::max(max_label, s.label);
    } else {
      s.label = names[r.label];
    }
    ds.samples.push_back(std::move(s));
  }
  if (numeric)
    for (int64_t i = 0; i <= max_label; ++i) ds.classes.push_back(std::to_string(i));
  return ds;
}

ImageDataset open_image_dataset(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "data set ", path, ": does not exist");
  if (fs::is_directory(path, ec)) return image_folder(path);
  return csv_dataset(path);
}

}  // namespace kiln
