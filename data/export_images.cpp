// Array data set -> JPEG image folder (see export_images.h).
#include "data/export_images.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/array_dataset.h"
#include "data/jpeg_encode.h"
#include "engine/io/atomic_file.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

const char* kMarker = ".kiln_export";

std::string class_name(int64_t label, int64_t num_classes) {
  int width = 1;
  for (int64_t k = num_classes - 1; k >= 10; k /= 10) ++width;
  std::string s = std::to_string(label);
  return std::string(s.size() < (size_t)width ? (size_t)width - s.size() : 0, '0') + s;
}

// Undoes the loader's normalization: pixel = round((v * std + mean) * 255), clamped to 0..255.
int64_t write_split(const ArrayDataset& d, double mean, double std, const fs::path& dir, int64_t num_classes,
                    int quality) {
  KILN_CHECK(d.channels == 1 || d.channels == 3, "export-images: ", d.source, " has ", d.channels,
             " channels (1 or 3 can be written as JPEG)");
  for (int64_t k = 0; k < num_classes; ++k) fs::create_directories(dir / class_name(k, num_classes));
  const int64_t plane = d.height * d.width;
  char name[32];
  for (int64_t i = 0; i < d.n; ++i) {
    Image im;
    im.w = (int)d.width;
    im.h = (int)d.height;
    im.c = (int)d.channels;
    im.px.resize((size_t)(plane * d.channels));
    const float* src = d.images.data() + i * d.sample_numel();
    for (int64_t c = 0; c < d.channels; ++c)
      for (int64_t p = 0; p < plane; ++p) {
        const double v = std::round(((double)src[c * plane + p] * std + mean) * 255.0);
        im.px[(size_t)(p * d.channels + c)] = (uint8_t)std::min(255.0, std::max(0.0, v));
      }
    std::snprintf(name, sizeof name, "%06lld.jpg", (long long)i);
    const std::string bytes = encode_jpeg(im, quality);
    // Plain writes (not atomic_write_file's fsync per file: 70k images); the marker written last
    // is what says the folder is complete.
    const std::string path = (dir / class_name(d.labels[(size_t)i], num_classes) / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), (std::streamsize)bytes.size());
    KILN_CHECK(f.good(), "export-images: cannot write ", path);
  }
  return d.n;
}

// What an export is made from, as the marker records it.
nlohmann::json export_request(const ExportImagesOptions& o) {
  auto folder = [](const std::string& p) -> nlohmann::json {
    if (p.empty()) return nullptr;
    std::error_code ec;
    const fs::path abs = fs::weakly_canonical(fs::absolute(p), ec);
    nlohmann::json files = nlohmann::json::object();  // name -> bytes, the folder's own files
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file(ec)) files[e.path().filename().string()] = (int64_t)e.file_size(ec);
    return {{"path", abs.string()}, {"files", files}};
  };
  return {{"data", folder(o.data)}, {"val", folder(o.val)}, {"quality", o.quality}};
}

// The differences between a marker and a request, "" when none.
std::string request_differences(const std::string& marker_text, const nlohmann::json& asked) {
  const nlohmann::json m = nlohmann::json::parse(marker_text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || !m.contains("request"))
    return "its marker does not record the data, split and quality (an older kiln)";
  const nlohmann::json& had = m["request"];
  std::string d;
  auto add = [&](const std::string& s) { d += (d.empty() ? "" : "; ") + s; };
  auto path = [](const nlohmann::json& f) { return f.is_object() ? f.value("path", std::string()) : std::string(); };
  for (const char* key : {"data", "val"}) {
    const std::string flag = std::string("--") + key, a = path(had.value(key, nlohmann::json())),
                      b = path(asked[key]);
    if (a != b)
      add(str_cat(flag, " ", a.empty() ? "(none)" : a, " there, ", b.empty() ? "(none)" : b, " asked"));
    else if (!a.empty() && had[key].value("files", nlohmann::json()) != asked[key]["files"])
      add(str_cat(flag, " ", a, ": its files changed since (names or sizes)"));
  }
  if (had.value("quality", -1) != asked["quality"].get<int>())
    add(str_cat("--quality ", had.value("quality", -1), " there, ", asked["quality"].get<int>(), " asked"));
  return d;
}

// The first entry of `out` that kiln's export did not write, "" when it holds only that.
std::string foreign_entry(const fs::path& out) {
  std::error_code ec;
  auto digits = [](const std::string& s, size_t n) {
    return !s.empty() && (n == 0 || s.size() == n) &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kMarker) continue;
    if ((name != "train" && name != "test") || !e.is_directory(ec)) return e.path().string();
    for (const auto& cls : fs::directory_iterator(e.path(), ec)) {
      if (!cls.is_directory(ec) || !digits(cls.path().filename().string(), 0)) return cls.path().string();
      for (const auto& f : fs::directory_iterator(cls.path(), ec)) {
        const std::string fn = f.path().filename().string();
        if (!f.is_regular_file(ec) || fn.size() != 10 || fn.substr(6) != ".jpg" || !digits(fn.substr(0, 6), 6))
          return f.path().string();
      }
    }
  }
  return "";
}

}  // namespace

ExportImagesResult export_images(const ExportImagesOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_CHECK(!o.out.empty(), "export-images: --out is required");
  KILN_CHECK(o.quality >= 1 && o.quality <= 100, "export-images: --quality must be 1..100, got ", o.quality);
  ExportImagesResult r;
  const fs::path out(o.out);
  const nlohmann::json asked = export_request(o);
  if (!o.force && fs::exists(out / kMarker)) {
    std::ifstream f(out / kMarker);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    r.replaced = request_differences(text, asked);
    if (r.replaced.empty()) {
      r.skipped = true;
      return r;
    }
    const std::string foreign = foreign_entry(out);
    KILN_CHECK(foreign.empty(), "export-images: ", o.out, " holds an export of other settings (", r.replaced,
               ") and files kiln did not write (", foreign,
               "); give another --out, or --force to write this export over it");
  }
  DataSplits s = load_training_data(o.data, o.val);
  if (fs::exists(out / kMarker) && foreign_entry(out).empty()) {  // the old export's images go, not just its marker
    fs::remove(out / kMarker);
    fs::remove_all(out / "train");
    fs::remove_all(out / "test");
  }
  int64_t max_label = s.train.max_label();
  if (s.val) max_label = std::max(max_label, s.val->max_label());
  r.classes = max_label + 1;
  fs::remove(out / kMarker);
  r.train = write_split(s.train, s.mean, s.std, out / "train", r.classes, o.quality);
  if (s.val) r.test = write_split(*s.val, s.mean, s.std, out / "test", r.classes, o.quality);
  const nlohmann::json mj = {{"kiln_export", 1},
                             {"request", asked},
                             {"train", r.train},
                             {"test", r.test},
                             {"classes", r.classes}};
  const std::string marker = mj.dump(1) + "\n";
  atomic_write_file((out / kMarker).string(), marker.data(), marker.size());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kiln
