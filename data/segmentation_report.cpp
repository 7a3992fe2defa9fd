// Segmentation `kiln data` report (see segmentation_report.h): every pair is read on worker
// threads (image at reduced scale for the statistics, mask whole), then aggregated per split.
#include "data/segmentation_report.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iomanip>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "data/channel_stats.h"
#include "data/decode.h"
#include "data/png_io.h"
#include "data/segmentation_dataset.h"

namespace kiln {
namespace {

struct PairResult {
  bool ok = false;
  std::string bad_path, reason, mode;
  int w = 0, h = 0;
  std::array<uint64_t, 256> pixels{};
  ChannelSums sums;
};

std::vector<PairResult> read_pairs(const SegmentationDataset& ds, int workers, int min_side) {
  std::vector<PairResult> res(ds.size());
  std::atomic<size_t> next{0};
  const int64_t k = (int64_t)ds.classes.size();  // 0: no classes.txt, any value is a class
  auto work = [&] {
    for (size_t i; (i = next++) < ds.size();) {
      PairResult& r = res[i];
      const SegmentationSample& s = ds.samples[i];
      r.bad_path = s.image;
      try {
        if (s.mask.empty()) throw DecodeError(s.image, "no mask (masks/ has no PNG with this image's stem)");
        DecodeOptions o;
        o.apply_exif = false;  // as the loader reads segmentation images
        o.min_w = o.min_h = min_side;
        const Image im = decode_image(s.image, o);
        r.bad_path = s.mask;
        const Image m = read_png_mask(s.mask);
        if (m.w != im.file_w || m.h != im.file_h)
          throw DecodeError(s.image, str_cat("image is ", im.file_w, "x", im.file_h, " but its mask ", s.mask, " is ",
                                             m.w, "x", m.h));
        for (uint8_t v : m.px) ++r.pixels[v];
        if (k > 0)
          for (int v = (int)k; v < 255; ++v)
            if (r.pixels[(size_t)v])
              throw DecodeError(s.mask, str_cat("mask holds class ", v, ", but classes.txt names ", k, " classes"));
        r.w = im.file_w;
        r.h = im.file_h;
        r.mode = im.format + " " + im.mode + " / mask " + m.mode;
        r.sums.add(im, 3);
        r.ok = true;
      } catch (const DecodeError& e) {
        r.bad_path = e.file();
        r.reason = e.reason();
      } catch (const std::exception& e) {
        r.reason = e.what();
      }
    }
  };
  std::vector<std::thread> th;
  for (int t = 0; t < workers; ++t) th.emplace_back(work);
  for (auto& t : th) t.join();
  return res;
}

bool report_split(const std::string& title, const SegmentationDataset& ds, const DataReportOptions& opt, int workers,
                  std::ostream& out, std::vector<double>* means, std::vector<double>* stds) {
  std::vector<PairResult> res = read_pairs(ds, workers, opt.stats_min_side);
  std::array<uint64_t, 256> pixels{};
  std::vector<int> ws, hs;
  std::map<std::string, size_t> modes;
  ChannelSums sums;
  size_t n_ok = 0;
  for (const PairResult& r : res) {
    if (!r.ok) continue;
    ++n_ok;
    for (size_t v = 0; v < 256; ++v) pixels[v] += r.pixels[v];
    ws.push_back(r.w);
    hs.push_back(r.h);
    ++modes[r.mode];
    sums.merge(r.sums);
  }
  int max_class = -1;
  for (int v = 0; v < 255; ++v)
    if (pixels[(size_t)v]) max_class = v;
  const int64_t k = !ds.classes.empty() ? (int64_t)ds.classes.size() : max_class + 1;
  out << "== " << title << ": " << ds.root << " (" << ds.size() << " image/mask pairs, " << k << " classes"
      << (ds.classes.empty() ? ", the largest mask value + 1" : ", from " + ds.classes_file) << ")\n";
  uint64_t total = 0;
  for (uint64_t p : pixels) total += p;
  size_t width = 5;
  for (const std::string& c : ds.classes) width = std::max(width, c.size());
  out << "class pixels (over the " << n_ok << " usable pairs; share of all their mask pixels):\n";
  std::vector<std::string> empty_classes;
  auto row = [&](const std::string& value, const std::string& name, uint64_t p) {
    out << "  " << std::setw(3) << value << "  " << std::left << std::setw((int)width) << name << std::right
        << std::setw(14) << p << std::setw(9) << std::fixed << std::setprecision(2)
        << (total ? 100.0 * (double)p / (double)total : 0.0) << "%" << std::defaultfloat << "\n";
  };
  for (int64_t c = 0; c < k; ++c) {
    row(std::to_string(c), ds.classes.empty() ? "" : ds.classes[(size_t)c], pixels[(size_t)c]);
    if (!pixels[(size_t)c]) empty_classes.push_back(ds.classes.empty() ? std::to_string(c) : ds.classes[(size_t)c]);
  }
  if (pixels[255]) row("255", "(ignore)", pixels[255]);
  for (const std::string& c : empty_classes) out << "warning: class '" << c << "' has no pixels in " << title << "\n";
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
  out << "bad pairs: " << ds.size() - n_ok << "\n";
  for (const PairResult& r : res)
    if (!r.ok) out << "  " << r.bad_path << ": " << r.reason << "\n";
  if (!ds.orphan_masks.empty()) {
    out << "masks without an image: " << ds.orphan_masks.size() << "\n";
    for (size_t i = 0; i < ds.orphan_masks.size() && i < 20; ++i) out << "  " << ds.orphan_masks[i] << "\n";
    if (ds.orphan_masks.size() > 20) out << "  ... (" << ds.orphan_masks.size() - 20 << " more)\n";
  }
  return n_ok > 0;
}

}  // namespace

int run_segmentation_report(const DataReportOptions& opt) {
  std::ostream& out = opt.out ? *opt.out : std::cout;
  const int workers = opt.workers > 0 ? opt.workers : std::max(1, (int)std::thread::hardware_concurrency() / 2);
  std::vector<std::pair<std::string, SegmentationDataset>> splits;
  try {
    if (has_segmentation_splits(opt.path)) {
      SegmentationSplits s = segmentation_folder_splits(opt.path);
      splits.push_back({"train", std::move(s.train)});
      if (!s.eval_name.empty()) splits.push_back({s.eval_name, std::move(s.eval)});
    } else {
      splits.push_back({"data", open_segmentation_dataset(opt.path)});
    }
  } catch (const std::exception& e) {
    (opt.err ? *opt.err : std::cerr) << "kiln: error: data: " << e.what() << "\n";
    return 1;
  }
  std::vector<double> mean(3, 0), stdv(3, 0);
  bool readable = false;
  for (size_t i = 0; i < splits.size(); ++i) {
    std::vector<double> m(3, 0), s(3, 0);
    const bool any = report_split(splits[i].first, splits[i].second, opt, workers, out, &m, &s);
    if (i == 0) mean = m, stdv = s, readable = any;
    out << "\n";
  }
  out << "segmentation data: masks are class indices, 255 = ignore; no contact sheets are drawn\n";
  if (!readable) {
    out << "per-channel mean/std (" << splits[0].first << "): no usable pair, nothing to compute; train with\n"
        << "  --normalize none  (or imagenet)\n";
    return 0;
  }
  bool constant = false;
  for (double& s : stdv)
    if (s < 5e-5) s = 1.0, constant = true;
  out << "per-channel mean/std (" << splits[0].first << " images, RGB on [0, 1]; " << kNormalizeStatisticsScope
      << "):\n  --normalize " << normalize_flag_values(3, mean.data(), stdv.data()) << "\n";
  if (constant) out << "  (a channel is constant: its std is given as 1, the scale left alone)\n";
  return 0;
}

}  // namespace kiln
