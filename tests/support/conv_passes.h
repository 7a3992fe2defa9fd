// Test helper: the CPU convolution's three passes (forward, input gradient, weight and bias gradient) on the
// same inputs, for tests that compare the kernels' algorithms (im2col, Winograd, valid taps) with each other.
// Runs with whatever algorithm the caller forced (cpu::conv2d_set_algo). The workspace is exactly
// conv2d_workspace_bytes and filled with garbage (0xAB: the kernels must not read it) before each pass, so no
// pass can live on what the one before left there (in a step the workspace is a temporary that other ops
// reuse in between; the valid taps' repacked weights are the same for forward and input gradient, so a share
// of them left unwritten went unnoticed when the workspace was filled once), the outputs with 7s (the kernels
// must overwrite every element). No checks here: the tests compare the outputs.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/cpu/conv2d.h"

namespace kiln::test {

template <typename T>
struct ConvPasses {
  std::vector<T> y, dx, dw, db;  // y: (N, K, OH, OW), dx: x's shape (N, C, H, W), dw: (K, C, R, S), db: (K)
};

// x: (N, C, H, W), w: (K, C, R, S), b: (K), dy: (N, K, OH, OW), all dense.
template <typename T>
ConvPasses<T> conv_passes(const Conv2dDesc& d, const std::vector<T>& x, const std::vector<T>& w,
                          const std::vector<T>& b, const std::vector<T>& dy) {
  const size_t bytes = cpu::conv2d_workspace_bytes(d, sizeof(T));
  std::unique_ptr<unsigned char[]> ws(new unsigned char[std::max<size_t>(bytes, 1)]);
  auto garbage = [&] { std::fill(ws.get(), ws.get() + bytes, static_cast<unsigned char>(0xAB)); };
  ConvPasses<T> o;
  o.y.assign(d.N * d.K * d.out_h() * d.out_w(), T(7));
  o.dx.assign(x.size(), T(7));
  o.dw.assign(w.size(), T(7));
  o.db.assign(b.size(), T(7));
  garbage();
  cpu::conv2d_forward<T>(d, x.data(), w.data(), b.data(), o.y.data(), ws.get());
  garbage();
  cpu::conv2d_backward_input<T>(d, dy.data(), w.data(), o.dx.data(), ws.get());
  garbage();
  cpu::conv2d_backward_weight<T>(d, x.data(), dy.data(), o.dw.data(), o.db.data(), ws.get());
  return o;
}

}  // namespace kiln::test
