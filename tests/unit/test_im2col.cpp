// im2col_plane / col2im_plane (kernels/cpu/im2col.cpp) against the formula of im2col.h computed
// pixel by pixel, on geometries that take both paths (the padded narrow-plane copy for output rows of
// at most 16 values, the bounds-computing path otherwise): strides 1-3, pads 0-3, dilations 1-2,
// windows larger than the plane, 1x1 planes. im2col must be exact; col2im sums a pixel's entries in
// (r, s, oh, ow) order from 0 in both paths, so it is exact too. NaN and inf pass through unchanged.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/im2col.h"

using namespace kiln;

namespace {

template <typename T>
void check_geometry(const cpu::Im2colGeom& g, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<T> x((size_t)(g.H * g.W));
  for (T& v : x) v = (T)u(rng);
  if (x.size() > 2) {
    x[1] = std::numeric_limits<T>::quiet_NaN();
    x[x.size() - 1] = std::numeric_limits<T>::infinity();
  }
  const int64_t RS = g.R * g.S, P = g.OH * g.OW, ld = P + 3;  // ld > P: rows are not packed
  std::vector<T> col((size_t)(RS * ld), T(-7)), want((size_t)(RS * ld), T(-7));
  std::vector<T> dx((size_t)(g.H * g.W), T(5)), dx_want((size_t)(g.H * g.W), T(0));
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dil_h, iw = ow * g.stride_w - g.pad_w + s * g.dil_w;
          const bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
          want[(size_t)((r * g.S + s) * ld + oh * g.OW + ow)] = in ? x[(size_t)(ih * g.W + iw)] : T(0);
        }
  cpu::im2col_plane(g, x.data(), col.data(), ld);
  CHECK(std::memcmp(col.data(), want.data(), sizeof(T) * col.size()) == 0);  // NaN compared as bits
  // col2im of a finite column buffer against the adjoint summed in the same order
  for (T& v : col) v = (T)u(rng);
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dil_h, iw = ow * g.stride_w - g.pad_w + s * g.dil_w;
          if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
            dx_want[(size_t)(ih * g.W + iw)] += col[(size_t)((r * g.S + s) * ld + oh * g.OW + ow)];
        }
  cpu::col2im_plane(g, col.data(), ld, dx.data());
  CHECK(std::memcmp(dx.data(), dx_want.data(), sizeof(T) * dx.size()) == 0);
}

}  // namespace

TEST_CASE("im2col and col2im of one plane match the formula on narrow and wide planes") {
  std::mt19937 rng(11);
  int checked = 0;
  for (int64_t H : {1, 2, 4, 7, 16, 40})
    for (int64_t R : {1, 3, 7})
      for (int64_t stride : {1, 2, 3})
        for (int64_t pad : {0, 1, 3})
          for (int64_t dil : {1, 2}) {
            const int64_t W = H == 40 ? 9 : H + 1;  // a wide plane with narrow rows too
            const int64_t OH = (H + 2 * pad - dil * (R - 1) - 1) / stride + 1;
            const int64_t OW = (W + 2 * pad - dil * (R - 1) - 1) / stride + 1;
            if (OH <= 0 || OW <= 0) continue;
            const cpu::Im2colGeom g{H, W, R, R, stride, stride, pad, pad, dil, dil, OH, OW};
            CAPTURE(H);
            CAPTURE(W);
            CAPTURE(R);
            CAPTURE(stride);
            CAPTURE(pad);
            CAPTURE(dil);
            check_geometry<float>(g, rng);
            check_geometry<double>(g, rng);
            ++checked;
          }
  // wide rows (the general path) and a plane too big for the padded copy
  for (auto g : {cpu::Im2colGeom{32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 32, 64},
                 cpu::Im2colGeom{70, 70, 3, 3, 5, 5, 1, 1, 1, 1, 14, 14},
                 cpu::Im2colGeom{64, 64, 7, 7, 2, 2, 3, 3, 1, 1, 32, 32}}) {
    check_geometry<float>(g, rng);
    ++checked;
  }
  CHECK(checked > 250);
}
