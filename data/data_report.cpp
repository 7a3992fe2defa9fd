// `kiln data` report (see data_report.h): lists the data set, decodes every image on worker
// threads, aggregates per split, writes one contact sheet per class.
#include "data/data_report.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "data/channel_stats.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/jpeg_encode.h"
#include "data/sampler.h"
#include "data/segmentation_report.h"
#include "data/segmentation_source.h"
#include "data/transforms.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

struct FileResult {
  bool ok = false;
  std::string reason, mode, format;
  int w = 0, h = 0;
  ChannelSums sums;  // this file's pixels (data/channel_stats.h: the one mean/std definition)
};

std::vector<FileResult> scan(const ImageDataset& ds, int workers, int min_side) {
  std::vector<FileResult> res(ds.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < ds.size();) {
      FileResult& r = res[i];
      try {
        Image im = decode_for_stats(ds.samples[i].path, 3, min_side);
        r.ok = true;
        r.w = im.file_w;
        r.h = im.file_h;
        r.mode = im.mode;
        r.format = im.format;
        r.sums.add(im, 3);
      } catch (const DecodeError& e) {
        r.reason = e.reason();
      } catch (const std::exception& e) {
        r.reason = e.what();
      }
    }
  };
  std::vector<std::thread> th;
  for (int k = 0; k < workers; ++k) th.emplace_back(work);
  for (auto& t : th) t.join();
  return res;
}

std::string safe_name(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '_';
  return o;
}

// 3x3 tiles of up to 9 random readable samples of one class; empty tiles stay dark gray.
bool contact_sheet(const ImageDataset& ds, const std::vector<FileResult>& res, int64_t cls, uint64_t seed,
                   int tile, const std::string& path, std::ostream& out) {
  std::vector<size_t> good;
  for (size_t i = 0; i < ds.size(); ++i)
    if (ds.samples[i].label == cls && res[i].ok) good.push_back(i);
  if (good.empty()) return false;
  auto perm = random_permutation(good.size(), seed, (uint64_t)cls);
  Image sheet;
  sheet.w = sheet.h = 3 * tile;
  sheet.px.assign((size_t)sheet.w * sheet.h * 3, 40);
  for (size_t k = 0; k < std::min<size_t>(9, good.size()); ++k) {
    try {
      DecodeOptions o;
      o.min_w = o.min_h = tile;
      Image im = decode_image(ds.samples[good[perm[k]]].path, o);
      im = resize_shorter(im, tile);
      im = crop_image(im, center_crop_box(im.w, im.h, tile, tile));
      const int ox = (int)(k % 3) * tile, oy = (int)(k / 3) * tile;
      for (int y = 0; y < tile; ++y)
        std::copy(im.row(y), im.row(y) + (size_t)tile * 3, sheet.row(oy + y) + (size_t)ox * 3);
    } catch (const std::exception&) {
      // already counted as bad or vanished since the scan: leave the tile empty
    }
  }
  try {
    write_jpeg(path, sheet, 90);
  } catch (const std::exception& e) {
    out << "  contact sheet: " << e.what() << "\n";
    return false;
  }
  return true;
}

// Returns whether any file could be read (its pixels are in means/stds).
bool report_split(const std::string& title, const ImageDataset& ds, const DataReportOptions& opt, int workers,
                  std::ostream& out, std::vector<double>* means, std::vector<double>* stds) {
  out << "== " << title << ": " << ds.root << " (" << ds.size() << " files, " << ds.classes.size()
      << " classes)\n";
  std::vector<FileResult> res = scan(ds, workers, opt.stats_min_side);
  // Class counts (readable / listed).
  std::vector<size_t> listed = ds.class_counts(), readable(ds.classes.size(), 0);
  for (size_t i = 0; i < ds.size(); ++i)
    if (res[i].ok && (size_t)ds.samples[i].label < readable.size()) ++readable[(size_t)ds.samples[i].label];
  size_t width = 5;
  for (auto& c : ds.classes) width = std::max(width, c.size());
  out << "classes:\n";
  for (size_t c = 0; c < ds.classes.size(); ++c) {
    out << "  " << std::left << std::setw((int)width) << ds.classes[c] << std::right << std::setw(8) << readable[c];
    if (readable[c] != listed[c]) out << "  (" << listed[c] - readable[c] << " unreadable)";
    out << "\n";
  }
  if (ds.classes.empty()) out << "  (none: a list of paths without labels)\n";
  auto mm = std::minmax_element(readable.begin(), readable.end());
  if (readable.empty()) {
  } else if (*mm.first == 0) {
    out << "warning: class '" << ds.classes[(size_t)(mm.first - readable.begin())] << "' has no readable images\n";
  } else if ((double)*mm.second / *mm.first >= opt.imbalance_ratio) {
    out << "warning: imbalanced classes: '" << ds.classes[(size_t)(mm.second - readable.begin())] << "' has "
        << *mm.second << " images, '" << ds.classes[(size_t)(mm.first - readable.begin())] << "' " << *mm.first
        << " (" << std::fixed << std::setprecision(1) << (double)*mm.second / *mm.first << std::defaultfloat
        << "x); consider --balance\n";
  }
  // Sizes and modes.
  std::vector<int> ws, hs;
  std::map<std::string, size_t> modes;
  ChannelSums sums;
  size_t n_ok = 0;
  for (auto& r : res) {
    if (!r.ok) continue;
    ++n_ok;
    ws.push_back(r.w);
    hs.push_back(r.h);
    ++modes[r.format + " " + r.mode];
    sums.merge(r.sums);
  }
  if (n_ok) {
    std::sort(ws.begin(), ws.end());
    std::sort(hs.begin(), hs.end());
    out << "image sizes: width " << ws.front() << " / " << ws[ws.size() / 2] << " / " << ws.back() << ", height "
        << hs.front() << " / " << hs[hs.size() / 2] << " / " << hs.back() << " (min / median / max)\n";
    out << "modes:";
    for (auto& kv : modes) out << "  " << kv.first << ": " << kv.second;
    out << "\n";
    sums.result(3, means->data(), stds->data());
  }
  size_t nbad = ds.size() - n_ok;
  out << "unreadable files: " << nbad << "\n";
  for (size_t i = 0; i < ds.size(); ++i)
    if (!res[i].ok) out << "  " << ds.samples[i].path << ": " << res[i].reason << "\n";
  if (!opt.out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(opt.out_dir, ec);
    size_t written = 0;
    for (size_t c = 0; c < ds.classes.size(); ++c) {
      std::string p = (fs::path(opt.out_dir) / (safe_name(title) + "_" + safe_name(ds.classes[c]) + ".jpg")).string();
      written += contact_sheet(ds, res, (int64_t)c, opt.seed, opt.tile, p, out);
    }
    out << "contact sheets: " << written << " written to " << opt.out_dir << "/\n";
  }
  return n_ok > 0;
}

}  // namespace

int run_data_report(const DataReportOptions& opt) {
  if (is_segmentation_data(opt.path)) return run_segmentation_report(opt);
  std::ostream& out = opt.out ? *opt.out : std::cout;
  const int workers = opt.workers > 0 ? opt.workers : std::max(1, (int)std::thread::hardware_concurrency() / 2);
  std::vector<std::pair<std::string, ImageDataset>> splits;
  try {
    if (has_split_folders(opt.path)) {
      DatasetSplits s = image_folder_splits(opt.path);
      splits.push_back({"train", std::move(s.train)});
      splits.push_back({s.eval_name, std::move(s.eval)});
    } else if (fs::is_directory(opt.path) && fs::is_directory(fs::path(opt.path) / "train")) {
      splits.push_back({"train", open_image_dataset((fs::path(opt.path) / "train").string())});  // as kiln train does
    } else {
      splits.push_back({"data", open_image_dataset(opt.path)});
    }
  } catch (const std::exception& e) {
    (opt.err ? *opt.err : std::cerr) << "kiln: error: data: " << e.what() << "\n";
    return 1;
  }
  std::vector<double> mean(3, 0), stdv(3, 0);
  bool readable = false;
  for (size_t k = 0; k < splits.size(); ++k) {
    std::vector<double> m(3, 0), s(3, 0);
    const bool any = report_split(splits[k].first, splits[k].second, opt, workers, out, &m, &s);
    if (k == 0) mean = m, stdv = s, readable = any;  // statistics of the training split
    out << "\n";
  }
  // The suggestion must be a flag `kiln train` accepts: no statistics without a readable file, and
  // a std that prints as 0 (a constant channel) would be refused ("stds must be > 0").
  if (!readable) {
    out << "per-channel mean/std (" << splits[0].first << "): no readable image, nothing to compute; train with\n"
        << "  --normalize none  (or imagenet)\n";
    return 0;
  }
  bool constant = false;
  for (double& s : stdv)
    if (s < 5e-5) s = 1.0, constant = true;
  out << "per-channel mean/std (" << splits[0].first << ", RGB on [0, 1]; " << kNormalizeStatisticsScope
      << "; the numbers kiln train measures for normalize auto):\n  --normalize "
      << normalize_flag_values(3, mean.data(), stdv.data()) << "\n";
  if (constant) out << "  (a channel is constant: its std is given as 1, the scale left alone)\n";
  return 0;
}

}  // namespace kiln
