// Helpers for the data unit tests: a synthetic photo, a temp folder that cleans itself up, and
// file writing. Test-only.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/image.h"

namespace kiln_test {

inline kiln::Image synth_photo(int w, int h, int seed) {
  kiln::Image im;
  im.w = w;
  im.h = h;
  im.c = 3;
  im.px.resize((size_t)w * h * 3);
  uint32_t s = 2166136261u ^ (uint32_t)seed;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      s = s * 1664525u + 1013904223u;
      int n = (int)(s >> 28) - 8;
      uint8_t* p = im.row(y) + (size_t)x * 3;
      double a = 127 + 100 * std::sin(x / 11.0 + seed) * std::cos(y / 7.0);
      p[0] = (uint8_t)std::min(255.0, std::max(0.0, a + n));
      p[1] = (uint8_t)(255 * x / std::max(w - 1, 1));
      p[2] = (uint8_t)(((x / 5 + y / 3 + seed) % 2) ? 200 : 40);
    }
  return im;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kiln_data_unit_XXXXXX";
    char* d = mkdtemp(tmpl);
    path = d ? d : "/tmp/kiln_data_unit_failed";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

inline void write_bytes(const std::string& p, const std::string& b) {
  std::filesystem::create_directories(std::filesystem::path(p).parent_path());
  std::ofstream(p, std::ios::binary).write(b.data(), (std::streamsize)b.size());
}

}  // namespace kiln_test
