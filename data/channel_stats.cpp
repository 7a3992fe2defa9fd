// Per-channel image statistics (see channel_stats.h).
#include "data/channel_stats.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "data/decode.h"

namespace kiln {

void ChannelSums::add(const Image& im, int channels) {
  const size_t np = (size_t)im.w * im.h;
  uint64_t a1[3] = {0, 0, 0}, a2[3] = {0, 0, 0};  // exact: 255^2 * 2^40 pixels fit in 64 bits
  for (size_t q = 0; q < np; ++q)
    for (int c = 0; c < im.c && c < 3; ++c) {
      const uint64_t v = im.px[q * im.c + c];
      a1[c] += v;
      a2[c] += v * v;
    }
  for (int c = 0; c < channels; ++c) {
    const int src = im.c == 1 ? 0 : c;
    s1[c] += (double)a1[src] / 255.0;
    s2[c] += (double)a2[src] / (255.0 * 255.0);
  }
  pixels += (double)np;
  images++;
}

void ChannelSums::merge(const ChannelSums& o) {
  for (int c = 0; c < 3; ++c) {
    s1[c] += o.s1[c];
    s2[c] += o.s2[c];
  }
  pixels += o.pixels;
  images += o.images;
}

void ChannelSums::result(int channels, double* mean, double* std) const {
  for (int c = 0; c < channels; ++c) {
    const double m = pixels > 0 ? s1[c] / pixels : 0.0;
    const double v = pixels > 0 ? s2[c] / pixels - m * m : 1.0;
    mean[c] = m;
    std[c] = std::sqrt(std::max(v, 1e-12));
  }
}

Image decode_for_stats(const std::string& path, int channels, int min_side) {
  DecodeOptions o;
  o.gray = channels == 1;
  const std::string bytes = read_file_bytes(path, o.max_file_bytes);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  int w = 0, h = 0;
  if (min_side > 0 && jpeg_probe_size(p, bytes.size(), true, &w, &h)) {
    // Keep the shorter side >= min_side (the statistics barely move; decoding is 4-60x faster).
    const double s = std::min(1.0, (double)min_side / std::min(w, h));
    o.min_w = (int)std::ceil(w * s);
    o.min_h = (int)std::ceil(h * s);
  }
  return decode_image_bytes(p, bytes.size(), path, o);
}

size_t image_channel_stats(const ImageDataset& ds, int channels, int min_side, int workers, size_t max_images,
                           float* mean, float* std) {
  const size_t n = max_images > 0 ? std::min(max_images, ds.size()) : ds.size();
  if (workers <= 0) workers = std::max(1, (int)std::thread::hardware_concurrency() / 2);
  std::atomic<size_t> next{0};
  std::vector<ChannelSums> acc((size_t)workers);
  auto work = [&](ChannelSums& a) {
    for (size_t k; (k = next++) < n;) {
      try {
        a.add(decode_for_stats(ds.samples[k * ds.size() / n].path, channels, min_side), channels);
      } catch (const std::exception&) {
      }
    }
  };
  std::vector<std::thread> th;
  for (int w = 0; w < workers; ++w) th.emplace_back(work, std::ref(acc[(size_t)w]));
  for (auto& t : th) t.join();
  ChannelSums tot;
  for (const ChannelSums& a : acc) tot.merge(a);
  double m[3], s[3];
  tot.result(channels, m, s);
  for (int c = 0; c < channels; ++c) {
    mean[c] = (float)m[c];
    std[c] = (float)s[c];
  }
  return tot.images;
}

size_t normalize_statistics(const ImageDataset& ds, int channels, int workers, float* mean, float* std) {
  return image_channel_stats(ds, channels, 0, workers, 0, mean, std);
}

std::string normalize_flag_values(int channels, const double* mean, const double* std) {
  std::string m, s;
  char buf[32];
  for (int c = 0; c < channels; ++c) {
    std::snprintf(buf, sizeof buf, "%s%.4f", c ? "," : "", mean[c]);
    m += buf;
    std::snprintf(buf, sizeof buf, "%s%.4f", c ? "," : "", std[c]);
    s += buf;
  }
  return m + ":" + s;
}

}  // namespace kiln
