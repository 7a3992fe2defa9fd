// Helpers for the tests that render kiln's HTML pages in headless Chromium (Debian's chromium): is it
// installed, read a file whole, and check that a screenshot is a PNG of the expected size with a drawing on
// it (many colours, not a flat background), and that a page fetches nothing. Test-only; no kiln logic here.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "data/decode.h"

namespace kiln_test {

inline std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool have_chromium() { return std::system("command -v chromium > /dev/null 2>&1") == 0; }

// The screenshot at PNG is W x H with more than MIN_COLOURS colours and MIN_NON_WHITE non-white samples (every
// second pixel of every second row).
inline void check_screenshot(const std::string& png, int w, int h, size_t min_colours, size_t min_non_white) {
  REQUIRE(std::filesystem::exists(png));
  kiln::Image im = kiln::decode_image(png);
  CHECK(im.w == w);
  CHECK(im.h == h);
  std::set<uint32_t> colours;
  size_t non_white = 0;
  for (int y = 0; y < im.h; y += 2)
    for (int x = 0; x < im.w; x += 2) {
      const uint8_t* p = im.row(y) + (size_t)x * im.c;
      colours.insert((uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]);
      non_white += (p[0] < 240 || p[1] < 240 || p[2] < 240);
    }
  MESSAGE(png, ": ", colours.size(), " colours, ", non_white, " non-white samples");
  CHECK(colours.size() > min_colours);
  CHECK(non_white > min_non_white);
}

// A self-contained page: the only URLs are the SVG namespace (a name, not a fetch), no <link>, no src=.
inline void check_no_network(const std::string& page) {
  size_t urls = 0, ns = 0;
  for (size_t p = page.find("http"); p != std::string::npos; p = page.find("http", p + 1)) ++urls;
  for (size_t p = page.find("http://www.w3.org/2000/svg"); p != std::string::npos;
       p = page.find("http://www.w3.org/2000/svg", p + 1))
    ++ns;
  CHECK(urls == ns);
  CHECK(page.find("<link") == std::string::npos);
  CHECK(page.find("src=") == std::string::npos);
}

}  // namespace kiln_test
