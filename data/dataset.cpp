// Image folder and CSV data sets (see dataset.h).
#include "data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <glob.h>
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

bool has_glob_characters(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool is_flat_image_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  bool images = false;
  for (const auto& e : fs::directory_iterator(path, fs::directory_options::follow_directory_symlink, ec)) {
    if (hidden(e.path())) continue;
    if (e.is_directory()) return false;
    images = images || (e.is_regular_file() && is_image_extension(e.path().string()));
  }
  return images && !ec;
}

ImageDataset unlabelled_images(const std::vector<std::string>& inputs) {
  KILN_CHECK(!inputs.empty(), "--data: no images given");
  ImageDataset ds;
  ds.labelled = false;
  std::error_code ec;
  std::vector<std::string> files;
  if (inputs.size() == 1 && fs::is_directory(inputs[0], ec)) {
    ds.root = inputs[0];
    KILN_CHECK(is_flat_image_folder(inputs[0]), "--data ", inputs[0],
               ": not a flat folder of images (images directly in it and no subfolder)");
    for (const auto& e : fs::directory_iterator(inputs[0], fs::directory_options::follow_directory_symlink, ec))
      if (!hidden(e.path()) && e.is_regular_file() && is_image_extension(e.path().string()))
        files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    ds.root = inputs.size() == 1 ? inputs[0] : str_cat(inputs.size(), " files (", inputs[0], ", ...)");
    for (const std::string& in : inputs) {
      if (!fs::exists(in, ec) && has_glob_characters(in)) {
        glob_t g{};
        const int rc = ::glob(in.c_str(), 0, nullptr, &g);
        std::vector<std::string> matched;
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
          if (fs::is_regular_file(g.gl_pathv[i], ec) && is_image_extension(g.gl_pathv[i])) matched.push_back(g.gl_pathv[i]);
        ::globfree(&g);
        KILN_CHECK(!matched.empty(), "--data ", in, ": the pattern matches no image file (.jpg .jpeg .png .bmp .gif .tga)");
        std::sort(matched.begin(), matched.end());
        files.insert(files.end(), matched.begin(), matched.end());
        continue;
      }
      KILN_CHECK(fs::exists(in, ec), "--data ", in, ": no such file");
      KILN_CHECK(fs::is_regular_file(in, ec) && is_image_extension(in), "--data ", in,
                 ": not an image file (a list of several inputs holds image files or patterns; a folder or a CSV "
                 "list is given alone)");
      files.push_back(in);
    }
  }
  KILN_CHECK(!files.empty(), "--data ", ds.root, ": no images");
  for (std::string& f : files) ds.samples.push_back({std::move(f), -1});
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
    KILN_CHECK(!f[0].empty(), "csv data set ", csv_path, ":", ln, ": expected 'path,label', got '", line, "'");
    KILN_CHECK(f.size() <= 2, "csv data set ", csv_path, ":", ln, ": ", f.size(),
               " columns, expected 2 (path,label): '", line, "'");
    rows.push_back({f[0], f.size() == 2 ? f[1] : std::string(), f.size() == 1 ? -ln : ln});
  }
  KILN_CHECK(!rows.empty(), "csv data set ", csv_path, ": no rows");
  // One column on every line: paths without labels (predict only). A mixture is an error naming a line.
  const bool paths_only = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.line < 0; });
  for (Row& r : rows) {
    KILN_CHECK(paths_only || r.line > 0, "csv data set ", csv_path, ":", -r.line,
               ": expected 'path,label', got '", r.path, "' (other lines have a label)");
    r.line = std::abs(r.line);
  }
  if (paths_only) {
    const std::string h = lower(rows[0].path);
    if (h == "path" || h == "file" || h == "filename" || h == "image") rows.erase(rows.begin());
    KILN_CHECK(!rows.empty(), "csv data set ", csv_path, ": only a header, no samples");
    ImageDataset ds;
    ds.root = csv_path;
    ds.labelled = false;
    for (const Row& r : rows) {
      const fs::path p(r.path);
      ds.samples.push_back({p.is_absolute() ? p.string() : (fs::path(csv_path).parent_path() / p).string(), -1});
    }
    return ds;
  }
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
