// conv2d forward / backward on the CPU (see conv2d.h).
//
// Per block of nb images (nb = conv2d_images_per_block):
//   col   : (C*R*S, nb*P)  im2col of the block, P = OH*OW, image b owns columns [b*P, (b+1)*P)
//   stage : (K, nb*P)      GEMM output (forward) or gathered dy (backward), only when nb > 1
// Group g owns rows [g*Cg*R*S, (g+1)*Cg*R*S) of col and rows [g*Kg, (g+1)*Kg) of stage / w.
//   forward        y_b      = w_g (Kg, Cg*R*S) @ col_g          then scatter stage -> y (+ bias)
//   backward_input col_g    = w_g^T @ dy_g (Kg, nb*P)         then col2im -> dx
//   backward_weight dw_g   += dy_g @ col_g^T                   summed over blocks
// Threads: with several, each pass is split by images, one OpenMP region per pass in which every
// thread runs all of the above for its own images on its own slice of the workspace (see
// split_threads below); inside it the loops and GEMMs run on the calling thread (gemm() is
// single-threaded inside a region, OpenBLAS always). One thread or one image: the loops are OpenMP
// loops and each GEMM splits its columns over the threads.
// Winograd (conv2d_winograd.cpp) replaces a pass where conv2d_uses_winograd(d, pass); the
// workspace is then the larger of its buffer and im2col's, since the per-call fallback for
// out-of-range values (NaN, inf, huge) still runs im2col.
// Valid taps (conv2d_taps.cpp) replace a pass where conv2d_uses_taps(d, pass) (small planes, not
// split by images: the channels are); the workspace then has room for them too.
#include "kernels/cpu/conv2d.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "engine/core/error.h"
#include "kernels/common/nn_check.h"
#include "kernels/cpu/conv2d_taps.h"
#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/lanes.h"

namespace kiln::cpu {

namespace {

// Columns a GEMM should have before blocking more images into it: below this OpenBLAS's packing
// overhead dominates (ResNet18 layer3/layer4 at 224 have P = 196 / 49).
constexpr int64_t kTargetCols = 512;

bool is_pointwise(const Conv2dDesc& d) {
  return d.R == 1 && d.S == 1 && d.stride_h == 1 && d.stride_w == 1 && d.pad_h == 0 && d.pad_w == 0;
}

Im2colGeom geom_of(const Conv2dDesc& d) {
  return Im2colGeom{d.H,        d.W,        d.R,     d.S,     d.stride_h, d.stride_w,
                    d.pad_h,    d.pad_w,    d.dil_h, d.dil_w, d.out_h(),  d.out_w()};
}

// Sizes derived once per call.
struct Plan {
  int64_t G, Cg, Kg, P, HW, CRSg, nb;
  bool direct;  // 1x1 stride-1 pad-0 with one image per block: x itself is the column matrix
};

Plan plan_of(const Conv2dDesc& d) {
  Plan p;
  p.G = d.groups;
  p.Cg = d.C / d.groups;
  p.Kg = d.K / d.groups;
  p.P = d.out_h() * d.out_w();
  p.HW = d.H * d.W;
  p.CRSg = p.Cg * d.R * d.S;
  p.nb = conv2d_images_per_block(d);
  p.direct = is_pointwise(d) && p.nb == 1;
  return p;
}

template <typename T>
struct Scratch {
  T* col;
  T* stage;
};

template <typename T>
Scratch<T> carve(const Conv2dDesc& d, const Plan& p, void* workspace) {
  T* base = static_cast<T*>(workspace);
  int64_t col_elems = p.direct ? 0 : d.C * d.R * d.S * p.nb * p.P;
  return Scratch<T>{base, base + col_elems};
}

// im2col of images [n0, n0+nb) into col (C*R*S, nb*P).
template <typename T>
void im2col_block(const Conv2dDesc& d, const Plan& p, const T* x, int64_t n0, int64_t nb, T* col) {
  const Im2colGeom g = geom_of(d);
  const int64_t ld = nb * p.P, RS = d.R * d.S;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < d.C; ++c)
      im2col_plane(g, x + ((n0 + b) * d.C + c) * p.HW, col + c * RS * ld + b * p.P, ld);
}

// dy of images [n0, n0+nb): (nb, K, P) -> stage (K, nb*P).
template <typename T>
void gather_dy(const Conv2dDesc& d, const Plan& p, const T* dy, int64_t n0, int64_t nb, T* stage) {
  const int64_t ld = nb * p.P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t k = 0; k < d.K; ++k)
      std::memcpy(stage + k * ld + b * p.P, dy + ((n0 + b) * d.K + k) * p.P, (size_t)p.P * sizeof(T));
}

Conv2dAlgo algo_from_env() {
  const char* v = std::getenv("KILN_CPU_CONV");
  if (!v || !*v || std::string(v) == "auto") return Conv2dAlgo::automatic;
  if (std::string(v) == "im2col") return Conv2dAlgo::im2col;
  if (std::string(v) == "winograd") return Conv2dAlgo::winograd;
  if (std::string(v) == "taps") return Conv2dAlgo::taps;
  KILN_CHECK(false, "conv2d (cpu): environment variable KILN_CPU_CONV=", v, " is not auto, im2col, winograd or taps");
  return Conv2dAlgo::automatic;
}

// -1 until the first use reads KILN_CPU_CONV.
std::atomic<int> g_algo{-1};

size_t im2col_workspace_bytes(const Conv2dDesc& d, size_t elem_size) {
  Plan p = plan_of(d);
  int64_t col = p.direct ? 0 : d.C * d.R * d.S * p.nb * p.P;
  int64_t stage = p.nb > 1 ? d.K * p.nb * p.P : 0;
  return (size_t)(col + stage) * elem_size;
}

}  // namespace

void conv2d_set_algo(Conv2dAlgo a) { g_algo.store((int)a); }

Conv2dAlgo conv2d_algo() {
  int a = g_algo.load();
  if (a < 0) {
    a = (int)algo_from_env();
    g_algo.store(a);
  }
  return (Conv2dAlgo)a;
}

namespace {

// Threads of the split by images (conv2d_forward below): 1 with one image or inside a region.
int split_threads(const Conv2dDesc& d) {
  if (d.N < 2 || omp_in_parallel()) return 1;
  return (int)std::min<int64_t>(omp_get_max_threads(), d.N);
}

}  // namespace

// Per (k, c) pair im2col does 9*N*P multiply-adds and Winograd 16*N*tiles plus one weight
// transform per call (the forward and input grad; the weight grad's inverse transform of dU is
// the same size): a fixed cost per call and thread, paid back by the multiply-adds saved on the
// images of one thread's share (N / threads, rounded up). Measured (bench_conv_cpu --algos,
// alternating calls, medians of 5; Winograd / im2col time; 2026-12-03 on the Intel Xeon (AVX-512,
// 2 vCPUs) build machine, ResNet18's 3x3 stride-1 layers), saved MACs per pair on the share in
// brackets:
//   forward / input grad: 1 thread, 8x224 layer4 (1480) 0.92 / 0.90x, 32x64 layer3 (2560) 0.73 /
//     0.71x, 32x64 layer4 (640) 1.20 / 1.15x; 2 threads, 32x64 layer3 (1280) 0.87 / 0.91x, 8x224
//     layer4 (740) 1.27 / 1.16x. So at least 1000.
//   weight grad: its GEMMs sum over a block's tiles into a (16, K, C) dU, read back for the
//     inverse transform, so it needs more: 1 thread, 8x224 layers 1-3 0.74-0.80x, 32x64 layer1
//     (40960) 0.94x, layer2 (10240) 0.87x, but layer3 (2560) 1.05x and 8x224 layer4 (1480) 1.29x;
//     2 threads, 8x224 layer3 (3920) 0.96x, 32x64 layer2 (5120) 0.95x, layer3 (1280) 1.24x. So at
//     least 3000.
constexpr int64_t kMinSavedMacs = 1000;
constexpr int64_t kMinSavedMacsWeight = 3000;

bool conv2d_winograd_pays(const Conv2dDesc& d, Conv2dPass pass) {
  if (!winograd_applies(d) || d.C < 16 || d.K < 16) return false;
  const int64_t nt = split_threads(d), share = (d.N + nt - 1) / nt;
  const int64_t P = d.out_h() * d.out_w(), tiles = ((d.out_h() + 1) / 2) * ((d.out_w() + 1) / 2);
  const int64_t saved = 9 * share * P - 16 * share * tiles;
  return saved >= (pass == Conv2dPass::backward_weight ? kMinSavedMacsWeight : kMinSavedMacs);
}

bool conv2d_uses_winograd(const Conv2dDesc& d, Conv2dPass pass) {
  switch (conv2d_algo()) {
    case Conv2dAlgo::im2col: return false;
    case Conv2dAlgo::winograd: return winograd_applies(d);
    case Conv2dAlgo::taps: return false;
    default: return conv2d_winograd_pays(d, pass);
  }
}

// Valid taps (conv2d_taps.cpp) against im2col on small planes: im2col's GEMM multiplies the
// padding's zeros, valid taps do not, but repack the weights (K*C*R*S values, ~0.9 ms for layer4's
// 512x512x3x3) and run one GEMM per (output pixel, kernel row), all images as its columns (the
// threads split the channels). Measured (bench_conv_cpu with KILN_CPU_CONV=im2col / taps, CPU time
// of the process, 3 alternating runs, 2026-12-07 on the Intel Xeon (Cooper Lake, 2 vCPUs) under load
// ~4 from other builds; ResNet18 at 32x64), the share of im2col's (output pixel, tap) pairs that
// valid taps skip in brackets:
//   layer4 3x3 on 2x2 (56%), all passes: 1 thread 0.72x, 2 threads 0.72x.
//   layer3 3x3 on 4x4 (31%): weight grad 1 thread 0.82x (Winograd, not chosen there: 0.87x), 2
//     threads ~0.9x; forward / input grad: Winograd as fast or faster (1 thread by 5-10%), it stays.
//   layer4.0 3x3 stride 2 (31%): 1 thread 0.95x, 2 threads 0.97x (weight grad alone at 2 threads
//     with the image split it was 1.15x): too close to call.
//   layer3.0 3x3 stride 2 (16%): 1 thread 1.16x.
// So: at least half the pairs skipped (any pass), or a quarter for the weight gradient of a stride-1
// layer; planes of at most 16 outputs (one GEMM per output pixel and kernel row) and at least 16
// images (the GEMMs' columns: at 8x224 the batch is 8, and im2col stays).
bool conv2d_taps_pays(const Conv2dDesc& d, Conv2dPass pass) {
  if (!taps_applies(d)) return false;
  const int64_t P = d.out_h() * d.out_w();
  if (d.N < 16 || P > 16) return false;  // first: taps_met_pairs walks every output pixel
  const int64_t all = d.R * d.S * P, skipped = all - taps_met_pairs(d);
  if (skipped * 2 >= all) return true;
  const bool stride1 = d.stride_h == 1 && d.stride_w == 1;
  return pass == Conv2dPass::backward_weight && stride1 && skipped * 4 >= all;
}

bool conv2d_uses_taps(const Conv2dDesc& d, Conv2dPass pass) {
  switch (conv2d_algo()) {
    case Conv2dAlgo::im2col:
    case Conv2dAlgo::winograd: return false;
    case Conv2dAlgo::taps: return taps_applies(d);
    default: return !conv2d_uses_winograd(d, pass) && conv2d_taps_pays(d, pass);
  }
}

int64_t conv2d_images_per_block(const Conv2dDesc& d) {
  int64_t P = std::max<int64_t>(1, d.out_h() * d.out_w());
  int64_t nb = (kTargetCols + P - 1) / P;
  return std::max<int64_t>(1, std::min(nb, d.N));
}

namespace {

// Output rows per chunk of a large plane's unfolding (one image per block, p.nb == 1): the forward and
// the weight gradient unfold and multiply kChunkBytes of columns at a time, so the column matrix is
// still in cache when the GEMM reads it (ResNet18's conv1 at 224 px unfolds 147 x 12544 values,
// 7.4 MB, per image). A chunk keeps at least kMinChunkCols columns (fewer made the GEMM slower than
// the cache misses it saved: layer2.0 at 224 px, 576 x 224 chunks, forward 6.4 -> 6.8 ms), and all
// output rows go at once when the whole unfolding is that small. The input gradient (col2im) still
// unfolds whole planes: the workspace keeps room for them. Measured on the Intel Xeon, bench_conv_cpu
// at 8x224, 1 thread: conv1 forward 17.4 -> 14.6 ms, weight gradient 19.4 -> 18.4.
constexpr size_t kChunkBytes = size_t(512) << 10;
constexpr int64_t kMinChunkCols = 1024;

int64_t rows_per_chunk(const Conv2dDesc& d, const Plan& p, size_t elem_size) {
  const int64_t OH = d.out_h(), OW = std::max<int64_t>(1, d.out_w());
  if (p.direct || p.nb != 1 || (size_t)(d.C * d.R * d.S * p.P) * elem_size <= kChunkBytes) return OH;
  const int64_t by_bytes = (int64_t)(kChunkBytes / elem_size) / (d.C * d.R * d.S * OW);
  const int64_t rows = std::max(by_bytes, (kMinChunkCols + OW - 1) / OW);
  return std::max<int64_t>(1, std::min(OH, rows));
}

// y (K, P) of one image += bias[k] on each channel's plane.
template <typename T>
void add_bias(const Conv2dDesc& d, const Plan& p, const T* bias, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) {
    T* dst = y + k * p.P;
    for (int64_t i = 0; i < p.P; ++i) dst[i] += bias[k];
  }
}

// im2col of output rows [oh0, oh1) of image n into col (C*R*S, (oh1 - oh0)*OW).
template <typename T>
void im2col_rows(const Conv2dDesc& d, const Plan& p, const T* x, int64_t n, int64_t oh0, int64_t oh1, T* col) {
  const Im2colGeom g = geom_of(d);
  const int64_t ld = (oh1 - oh0) * d.out_w(), RS = d.R * d.S;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.C; ++c) im2col_plane_rows(g, x + (n * d.C + c) * p.HW, col + c * RS * ld, ld, oh0, oh1);
}

// One thread's convolution of d's images (the bodies of the three passes; see the split below).
// U: the Winograd weight transform shared by the threads (null: im2col); Winograd's V and M go past
// U's place in this thread's workspace.
template <typename T>
void forward_one(const Conv2dDesc& d, const T* U, const T* x, const T* w, const T* bias, T* y, void* workspace) {
  if (U) return winograd_forward_u(d, x, U, bias, y, static_cast<T*>(workspace) + winograd_u_elems(d));
  const Plan p = plan_of(d);
  const Scratch<T> s = carve<T>(d, p, workspace);
  const int64_t ohc = rows_per_chunk(d, p, sizeof(T)), OH = d.out_h(), OW = d.out_w();
  if (ohc < OH) {  // one image per block, unfolded and multiplied a chunk of output rows at a time
    for (int64_t n = 0; n < d.N; ++n) {
      for (int64_t oh0 = 0; oh0 < OH; oh0 += ohc) {
        const int64_t oh1 = std::min(OH, oh0 + ohc), ld = (oh1 - oh0) * OW;
        im2col_rows(d, p, x, n, oh0, oh1, s.col);
        for (int64_t g = 0; g < p.G; ++g)
          gemm<T>(false, false, p.Kg, ld, p.CRSg, T(1), w + g * p.Kg * p.CRSg, p.CRSg, s.col + g * p.CRSg * ld, ld,
                  T(0), y + (n * d.K + g * p.Kg) * p.P + oh0 * OW, p.P);
      }
      if (bias) add_bias(d, p, bias, y + n * d.K * p.P);
    }
    return;
  }
  for (int64_t n0 = 0; n0 < d.N; n0 += p.nb) {
    const int64_t nb = std::min(p.nb, d.N - n0), ld = nb * p.P;
    if (!p.direct) im2col_block(d, p, x, n0, nb, s.col);
    for (int64_t g = 0; g < p.G; ++g) {
      const T* B = p.direct ? x + (n0 * d.C + g * p.Cg) * p.HW : s.col + g * p.CRSg * ld;
      T* out = nb == 1 ? y + (n0 * d.K + g * p.Kg) * p.P : s.stage + g * p.Kg * ld;
      gemm<T>(false, false, p.Kg, ld, p.CRSg, T(1), w + g * p.Kg * p.CRSg, p.CRSg, B, ld, T(0), out,
              ld);
    }
    if (nb > 1) {
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t k = 0; k < d.K; ++k) {
          const T* src = s.stage + k * ld + b * p.P;
          T* dst = y + ((n0 + b) * d.K + k) * p.P;
          const T bk = bias ? bias[k] : T(0);
          for (int64_t i = 0; i < p.P; ++i) dst[i] = src[i] + bk;
        }
    } else if (bias) {
      add_bias(d, p, bias, y + n0 * d.K * p.P);
    }
  }
}

template <typename T>
void backward_input_one(const Conv2dDesc& d, const T* U, const T* dy, const T* w, T* dx, void* workspace) {
  if (U) return winograd_backward_input_u(d, dy, U, dx, static_cast<T*>(workspace) + winograd_u_elems(d));
  const Plan p = plan_of(d);
  const Scratch<T> s = carve<T>(d, p, workspace);
  const Im2colGeom geom = geom_of(d);
  const int64_t RS = d.R * d.S;
  for (int64_t n0 = 0; n0 < d.N; n0 += p.nb) {
    const int64_t nb = std::min(p.nb, d.N - n0), ld = nb * p.P;
    const T* dyb = dy + n0 * d.K * p.P;
    if (nb > 1) {
      gather_dy(d, p, dy, n0, nb, s.stage);
      dyb = s.stage;
    }
    for (int64_t g = 0; g < p.G; ++g) {
      T* out = p.direct ? dx + (n0 * d.C + g * p.Cg) * p.HW : s.col + g * p.CRSg * ld;
      gemm<T>(true, false, p.CRSg, ld, p.Kg, T(1), w + g * p.Kg * p.CRSg, p.CRSg, dyb + g * p.Kg * ld,
              ld, T(0), out, ld);
    }
    if (!p.direct) {
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t c = 0; c < d.C; ++c)
          col2im_plane(geom, s.col + c * RS * ld + b * p.P, ld, dx + ((n0 + b) * d.C + c) * p.HW);
    }
  }
}

// dw only (the bias gradient is conv2d_backward_weight's).
template <typename T>
void backward_weight_one(const Conv2dDesc& d, bool wino, const T* x, const T* dy, T* dw, void* workspace) {
  const Plan p = plan_of(d);
  const Scratch<T> s = carve<T>(d, p, workspace);
  if (wino && winograd_backward_weight(d, x, dy, dw, workspace)) return;
  if (d.N == 0) std::fill(dw, dw + d.K * p.CRSg, T(0));
  const int64_t ohc = rows_per_chunk(d, p, sizeof(T)), OH = d.out_h(), OW = d.out_w();
  if (ohc < OH) {  // one image per block, a chunk of output rows at a time: dw += dy_chunk col_chunk^T
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t oh0 = 0; oh0 < OH; oh0 += ohc) {
        const int64_t oh1 = std::min(OH, oh0 + ohc), ld = (oh1 - oh0) * OW;
        im2col_rows(d, p, x, n, oh0, oh1, s.col);
        const T beta = n == 0 && oh0 == 0 ? T(0) : T(1);
        for (int64_t g = 0; g < p.G; ++g)
          gemm<T>(false, true, p.Kg, p.CRSg, ld, T(1), dy + (n * d.K + g * p.Kg) * p.P + oh0 * OW, p.P,
                  s.col + g * p.CRSg * ld, ld, beta, dw + g * p.Kg * p.CRSg, p.CRSg);
      }
    return;
  }
  for (int64_t n0 = 0; n0 < d.N; n0 += p.nb) {
    const int64_t nb = std::min(p.nb, d.N - n0), ld = nb * p.P;
    if (!p.direct) im2col_block(d, p, x, n0, nb, s.col);
    const T* dyb = dy + n0 * d.K * p.P;
    if (nb > 1) {
      gather_dy(d, p, dy, n0, nb, s.stage);
      dyb = s.stage;
    }
    const T beta = n0 == 0 ? T(0) : T(1);
    for (int64_t g = 0; g < p.G; ++g) {
      const T* B = p.direct ? x + (n0 * d.C + g * p.Cg) * p.HW : s.col + g * p.CRSg * ld;
      gemm<T>(false, true, p.Kg, p.CRSg, ld, T(1), dyb + g * p.Kg * ld, ld, B, ld, beta,
              dw + g * p.Kg * p.CRSg, p.CRSg);
    }
  }
}

// The split by images: with several threads (and at least two images), thread t of nt convolves
// images [N*t/nt, N*(t+1)/nt) on its own, every step of it (im2col, its GEMMs single-threaded,
// scatter or col2im; or the Winograd transforms and GEMMs) in its own slice of the workspace, all
// in one OpenMP region per pass. Splitting each step over all images instead (the GEMM's columns,
// im2col's planes) hands every buffer from the core that wrote it to the one that reads it; on
// this project's 2-vCPU machines (AMD EPYC) that cross-core traffic cost more than the second
// core gave: 2 threads were 1.0-2.8x slower than one on ResNet18's 3x3 layers, and the split by
// images runs 2.0x faster than one thread (measured on a copy of the forward pass, 2026-12-03).
// The input x (or dy) arrives split the same way from kiln's elementwise ops (static halves of a
// contiguous tensor = the first and second half of the images).
// The weight gradient: thread 0 sums its images into dw, thread t > 0 into a partial (K, Cg*R*S)
// after the slices, and dw += partials in thread order (a fixed order for a thread count; a
// different thread count rounds differently).
Conv2dDesc images(const Conv2dDesc& d, int64_t n) {
  Conv2dDesc s = d;
  s.N = n;
  return s;
}

// One thread's scratch for d's images.
size_t one_thread_bytes(const Conv2dDesc& d, bool wino, size_t elem_size) {
  const size_t im2col = im2col_workspace_bytes(d, elem_size);
  return wino ? std::max(im2col, winograd_workspace_bytes(d, elem_size)) : im2col;
}

struct Split {
  int nt;
  size_t slice;     // bytes of one thread's scratch (64-byte multiple)
  size_t partials;  // bytes of the weight-gradient partials of threads 1..nt-1
};

Split split_of(const Conv2dDesc& d, bool wino, size_t elem_size) {
  Split sp{split_threads(d), 0, 0};
  if (sp.nt == 1) return sp;
  const int64_t most = (d.N + sp.nt - 1) / sp.nt;
  sp.slice = (one_thread_bytes(images(d, most), wino, elem_size) + 63) / 64 * 64;
  sp.partials = (size_t)(sp.nt - 1) * (size_t)(d.K * (d.C / d.groups) * d.R * d.S) * elem_size;
  return sp;
}

// Whether some pass runs Winograd: the workspace (and each thread's slice) then has room for it.
bool any_winograd(const Conv2dDesc& d) {
  return conv2d_uses_winograd(d, Conv2dPass::forward) || conv2d_uses_winograd(d, Conv2dPass::backward_input) ||
         conv2d_uses_winograd(d, Conv2dPass::backward_weight);
}

Split split_for(const Conv2dDesc& d, size_t elem_size) { return split_of(d, any_winograd(d), elem_size); }

// Runs f(t, n0, n) for each thread's images in one region; an exception in a thread is rethrown
// after the region (none is expected: the desc was checked before).
template <typename F>
void for_each_share(const Conv2dDesc& d, int nt, F f) {
  std::exception_ptr err;
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t n0 = d.N * t / n, n1 = d.N * (t + 1) / n;
    try {
      f(t, n0, n1 - n0);
    } catch (...) {
#pragma omp critical(kiln_conv2d_split)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dDesc& d, size_t elem_size) {
  conv2d_check(d, "conv2d_workspace_bytes");
  // The passes on im2col / Winograd (split by images), and room for valid taps' passes (all images at
  // once, conv2d_taps.h) where some pass takes them; only the latter when all three do.
  const bool taps_f = conv2d_uses_taps(d, Conv2dPass::forward), taps_i = conv2d_uses_taps(d, Conv2dPass::backward_input),
             taps_w = conv2d_uses_taps(d, Conv2dPass::backward_weight);
  if (taps_f && taps_i && taps_w) return taps_workspace_bytes(d, elem_size);
  const Split sp = split_for(d, elem_size);
  const size_t split = sp.nt == 1 ? one_thread_bytes(d, any_winograd(d), elem_size) : sp.nt * sp.slice + sp.partials;
  return taps_f || taps_i || taps_w ? std::max(split, taps_workspace_bytes(d, elem_size)) : split;
}

// The Winograd weight transform of a pass, once for all threads, into the start of the workspace
// (thread 0's slice; the other slices leave that place unused). Null: the pass runs im2col (not
// chosen, or the input `in` (x or dy, n values) or w failed winograd_values_in_range: decided for all
// threads at once, before any thread's im2col could overwrite U).
template <typename T>
const T* shared_u(const Conv2dDesc& d, Conv2dPass pass, const T* in, int64_t n, const T* w, void* workspace) {
  if (!conv2d_uses_winograd(d, pass) || !winograd_values_in_range(in, n)) return nullptr;
  T* U = static_cast<T*>(workspace);
  return winograd_transform_weights(d, w, pass == Conv2dPass::backward_input, U) ? U : nullptr;
}

template <typename T>
void conv2d_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace) {
  conv2d_check(d, "conv2d_forward");
  if (conv2d_uses_taps(d, Conv2dPass::forward)) return taps_forward(d, x, w, bias, y, workspace);
  const T* U = shared_u(d, Conv2dPass::forward, x, d.N * d.C * d.H * d.W, w, workspace);
  const Split sp = split_for(d, sizeof(T));  // the workspace's layout, for all passes
  if (sp.nt == 1) return forward_one(d, U, x, w, bias, y, workspace);
  char* ws = static_cast<char*>(workspace);
  for_each_share(d, sp.nt, [&](int64_t t, int64_t n0, int64_t n) {
    forward_one(images(d, n), U, x + n0 * d.C * d.H * d.W, w, bias, y + n0 * d.K * d.out_h() * d.out_w(),
                ws + t * sp.slice);
  });
}

template <typename T>
void conv2d_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace) {
  conv2d_check(d, "conv2d_backward_input");
  if (conv2d_uses_taps(d, Conv2dPass::backward_input)) return taps_backward_input(d, dy, w, dx, workspace);
  const T* U = shared_u(d, Conv2dPass::backward_input, dy, d.N * d.K * d.out_h() * d.out_w(), w, workspace);
  const Split sp = split_for(d, sizeof(T));  // the workspace's layout, for all passes
  if (sp.nt == 1) return backward_input_one(d, U, dy, w, dx, workspace);
  char* ws = static_cast<char*>(workspace);
  for_each_share(d, sp.nt, [&](int64_t t, int64_t n0, int64_t n) {
    backward_input_one(images(d, n), U, dy + n0 * d.K * d.out_h() * d.out_w(), w, dx + n0 * d.C * d.H * d.W,
                       ws + t * sp.slice);
  });
}

template <typename T>
void conv2d_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, T* dbias,
                            void* workspace) {
  conv2d_check(d, "conv2d_backward_weight");
  const bool wino = conv2d_uses_winograd(d, Conv2dPass::backward_weight);
  const bool taps = conv2d_uses_taps(d, Conv2dPass::backward_weight);
  const Split sp = split_for(d, sizeof(T));  // the workspace's layout, for all passes
  const Plan p = plan_of(d);
  if (taps) {
    taps_backward_weight(d, x, dy, dw, workspace);
  } else if (sp.nt == 1) {
    backward_weight_one(d, wino, x, dy, dw, workspace);
  } else {
    char* ws = static_cast<char*>(workspace);
    T* partials = reinterpret_cast<T*>(ws + sp.nt * sp.slice);  // (nt - 1, K, Cg*R*S)
    const int64_t nw = d.K * p.CRSg;
    // for_each_share's region, and then in the same region (after a barrier, outside the try: a thread that
    // threw still reaches it) dw += partials in thread order, each thread over its own range of dw: per element
    // the same additions in the same order as one region per partial gave (the same bits), one fork/join less
    // per pass (a futex wake-up of the sleeping worker each, at 2 threads).
    std::exception_ptr err;
#pragma omp parallel num_threads(sp.nt)
    {
      const int64_t t = omp_get_thread_num(), m = omp_get_num_threads();
      const int64_t n0 = d.N * t / m, n1 = d.N * (t + 1) / m;
      try {
        backward_weight_one(images(d, n1 - n0), wino, x + n0 * d.C * d.H * d.W, dy + n0 * d.K * p.P,
                            t == 0 ? dw : partials + (t - 1) * nw, ws + t * sp.slice);
      } catch (...) {
#pragma omp critical(kiln_conv2d_split)
        if (!err) err = std::current_exception();
      }
#pragma omp barrier
      if (!err) {
        const int64_t i0 = nw * t / m, i1 = nw * (t + 1) / m;
        for (int64_t q = 1; q < m; ++q) {  // one contiguous pass per partial, so the loop vectorizes
          const T* part = partials + (q - 1) * nw;
          for (int64_t i = i0; i < i1; ++i) dw[i] += part[i];
        }
      }
    }
    if (err) std::rethrow_exception(err);
  }
  if (dbias) {
    // Summed in double per channel (N*P terms of mixed sign lose digits in float), in 8 lanes
    // (kernels/cpu/lanes.h: the single chain was 3.7% of a small-CNN step at batch 64).
    const int64_t N = d.N, K = d.K, P = p.P;
#pragma omp parallel for schedule(static) firstprivate(N, K, P, dy, dbias)
    for (int64_t k = 0; k < K; ++k) {
      lanes::Lanes acc = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t n = 0; n < N; ++n) lanes::add_run(dy + (n * K + k) * P, P, acc);
      dbias[k] = (T)lanes::fold(acc);
    }
  }
}

#define KILN_INSTANTIATE_CONV2D(T)                                                                  \
  template void conv2d_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*);     \
  template void conv2d_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);        \
  template void conv2d_backward_weight<T>(const Conv2dDesc&, const T*, const T*, T*, T*, void*);
KILN_INSTANTIATE_CONV2D(float)
KILN_INSTANTIATE_CONV2D(double)
#undef KILN_INSTANTIATE_CONV2D

}  // namespace kiln::cpu
