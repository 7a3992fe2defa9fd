// Mask scan (see segmentation_scan.h): one std::thread per worker over a shared index counter,
// per-thread histograms merged at the end, so the result does not depend on the thread count.
#include "data/segmentation_scan.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "data/png_io.h"

namespace kiln {

MaskScan scan_masks(const SegmentationDataset& ds, int workers) {
  const size_t n = ds.size();
  MaskScan r;
  r.mask_w.assign(n, 0);
  r.mask_h.assign(n, 0);
  std::vector<std::string> reason(n);
  const int nt = std::max(1, std::min<int>(workers > 0 ? workers : (int)std::thread::hardware_concurrency() / 2,
                                           (int)std::max<size_t>(n, 1)));
  std::vector<std::array<uint64_t, 256>> hist((size_t)nt);
  for (auto& h : hist) h.fill(0);
  std::atomic<size_t> next{0};
  auto work = [&](int t) {
    for (size_t i; (i = next++) < n;) {
      const SegmentationSample& s = ds.samples[i];
      if (s.mask.empty()) {
        reason[i] = "no mask (masks/ has no PNG with this image's stem)";
        continue;
      }
      try {
        const Image m = read_png_mask(s.mask);
        for (uint8_t v : m.px) ++hist[(size_t)t][v];
        r.mask_w[i] = m.w;
        r.mask_h[i] = m.h;
      } catch (const DecodeError& e) {
        reason[i] = e.reason();
      } catch (const std::exception& e) {
        reason[i] = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nt; ++t) threads.emplace_back(work, t);
  work(0);
  for (auto& th : threads) th.join();
  for (const auto& h : hist)
    for (size_t v = 0; v < 256; ++v) r.pixels[v] += h[v];
  for (size_t i = 0; i < n; ++i) {
    if (reason[i].empty()) {
      ++r.masks_read;
    } else {
      const SegmentationSample& s = ds.samples[i];
      r.bad.push_back({s.mask.empty() ? s.image : s.mask, reason[i]});
    }
  }
  for (int v = 254; v >= 0; --v)
    if (r.pixels[(size_t)v]) {
      r.max_class = v;
      break;
    }
  return r;
}

}  // namespace kiln
