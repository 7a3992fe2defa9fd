// Convolution by valid taps on the CPU (see conv2d_taps.h).
//
// Workspace (elements): Wt (K, R*S, C) | xg (H*W, C, N) | yg (OH*OW, K, N).
// Each pass opens one region for the gathers (every thread's GEMMs read all of xg, or of yg) and one in which
// each thread repacks its share of Wt, runs its GEMMs and scatters or unpacks the channels it wrote.
//   forward:         Wt <- w; xg <- x; for each output pixel o and kernel row r that meets the plane
//                    (input row ih = oh*sh - ph + r, taps s0..s1 whose input columns iw0.. are inside):
//                      yg[o] (K, N) (+)= Wt[:, r*S+s0 .. r*S+s1, :] (K, ns*C) @ xg[ih*W+iw0 ..] (ns*C, N)
//                    then y[n, k, o] = yg[o, k, n] (+ bias).
//   input grad:      the adjoint, Wt <- w; yg <- dy; xg = 0;
//                      xg[ih*W+iw0 ..] (ns*C, N) += Wt[...]^T (ns*C, K) @ yg[o] (K, N);  dx <- xg.
//   weight grad:     Wt (as dWt) = 0; xg <- x; yg <- dy;
//                      dWt[:, r*S+s0 .., :] (K, ns*C) += yg[o] (K, N) @ xg[ih*W+iw0 ..]^T (N, ns*C);
//                    dw[k, c, t] = dWt[k, t, c].
// The (o, r) order is fixed, so every thread count gives the same bits for the same images.
#include "kernels/cpu/conv2d_taps.h"

#include <omp.h>

#include <algorithm>
#include <exception>

#include "kernels/cpu/gemm.h"

namespace kiln::cpu {

namespace {

// One (output pixel, kernel row) block: taps r*S + s0 .. r*S + s1 - 1 read input pixels
// ih*W + iw0 .. ih*W + iw0 + (s1 - s0) - 1.
struct Run {
  int64_t o, tap0, ns, in0;
};

// Calls f(Run) for every (output pixel, kernel row) that meets the plane, in a fixed order.
template <typename F>
void for_each_run(const Conv2dDesc& d, F f) {
  const int64_t OH = d.out_h(), OW = d.out_w();
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t iw_base = ow * d.stride_w - d.pad_w;
      const int64_t s0 = std::max<int64_t>(0, -iw_base), s1 = std::min<int64_t>(d.S, d.W - iw_base);
      if (s1 <= s0) continue;
      for (int64_t r = 0; r < d.R; ++r) {
        const int64_t ih = oh * d.stride_h - d.pad_h + r;
        if (ih < 0 || ih >= d.H) continue;
        f(Run{oh * OW + ow, r * d.S + s0, s1 - s0, ih * d.W + iw_base + s0});
      }
    }
}

template <typename T>
struct Bufs {
  T* xg;  // (H*W, C, N)
  T* yg;  // (OH*OW, K, N)
};

// The scratch past Wt's place.
template <typename T>
Bufs<T> carve(const Conv2dDesc& d, T* scratch) {
  return Bufs<T>{scratch, scratch + d.N * d.C * d.H * d.W};
}

// Per output channel k in [k0, k1) and input channel c in [c0, c1), (C, RS) <-> (RS, C): to_taps
// Wt[k][t][c] = w[k][c][t] (the weights, tap-major), else dw[k][c][t] = dWt[k][t][c] (the weight gradient
// back to KCRS). Called by each thread for its own share inside the GEMMs' region (no region of its own):
// a thread transposes the rows or columns its GEMMs read or wrote, so the 9.4 MB of a layer4 weight are
// not handed from the core that transposed them to the core that reads them, and the pass opens one
// region less (docs/cpu-bf16.md, "f32 at 32x64, 2 threads").
template <typename T>
void transpose_taps(const Conv2dDesc& d, const T* src, T* dst, bool to_taps, int64_t k0, int64_t k1, int64_t c0,
                    int64_t c1) {
  const int64_t RS = d.R * d.S, C = d.C;
  const int64_t src_c = to_taps ? RS : 1, src_t = to_taps ? 1 : C;  // src strides of c and t
  const int64_t dst_c = to_taps ? 1 : RS, dst_t = to_taps ? C : 1;
  for (int64_t k = k0; k < k1; ++k) {
    const T* s = src + k * C * RS;
    T* o = dst + k * C * RS;
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t t = 0; t < RS; ++t) o[t * dst_t + c * dst_c] = s[c * src_c + t * src_t];
  }
}

// g[(i*CH + c)*N + n] = a[(n*CH + c)*HW + i]: (N, CH, HW) -> (HW, CH, N), channels split over the threads
// of the caller's region (an orphaned `omp for`: the caller opens the region; nowait, the caller's barrier).
template <typename T>
void gather_for(const T* a, int64_t N, int64_t CH, int64_t HW, T* g) {
#pragma omp for schedule(static) nowait
  for (int64_t c = 0; c < CH; ++c)
    for (int64_t n = 0; n < N; ++n) {
      const T* src = a + (n * CH + c) * HW;
      for (int64_t i = 0; i < HW; ++i) g[(i * CH + c) * N + n] = src[i];
    }
}

// gather_for of a (N, CH, HW), and of b (N, CH_B, HW_B) into gb when b is given, in one region.
template <typename T>
void gather(const T* a, int64_t N, int64_t CH, int64_t HW, T* g, const T* b = nullptr, int64_t CH_B = 0,
            int64_t HW_B = 0, T* gb = nullptr) {
#pragma omp parallel
  {
    gather_for(a, N, CH, HW, g);
    if (b) gather_for(b, N, CH_B, HW_B, gb);
  }
}

// a[(n*CH + c)*HW + i] = g[(i*CH + c)*N + n] (+ bias[c]) for the channels c in [c0, c1): called by each thread
// for the channels its GEMMs wrote, inside their region, as transpose_taps.
template <typename T>
void scatter(const T* g, int64_t N, int64_t CH, int64_t HW, const T* bias, T* a, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    const T b = bias ? bias[c] : T(0);
    for (int64_t n = 0; n < N; ++n) {
      T* dst = a + (n * CH + c) * HW;
      for (int64_t i = 0; i < HW; ++i) dst[i] = g[(i * CH + c) * N + n] + b;
    }
  }
}

}  // namespace

bool taps_applies(const Conv2dDesc& d) { return d.groups == 1 && d.dil_h == 1 && d.dil_w == 1; }

int64_t taps_met_pairs(const Conv2dDesc& d) {
  int64_t pairs = 0;
  for_each_run(d, [&](const Run& run) { pairs += run.ns; });
  return pairs;
}

namespace {

int64_t taps_wt_elems(const Conv2dDesc& d) { return d.K * d.R * d.S * d.C; }

}  // namespace

size_t taps_workspace_bytes(const Conv2dDesc& d, size_t elem_size) {
  const int64_t elems = d.K * d.R * d.S * d.C + d.N * d.C * d.H * d.W + d.N * d.K * d.out_h() * d.out_w();
  return (size_t)elems * elem_size;
}

namespace {

// Runs f(lo, hi) for thread t's share [n*t/nt, n*(t+1)/nt) of n channels, one OpenMP region (one
// thread when called inside a region); an exception in a thread is rethrown after the region.
template <typename F>
void for_each_channel_share(int64_t n, F f) {
  const int nt = omp_in_parallel() ? 1 : (int)std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), n));
  if (nt == 1) return f(int64_t(0), n);
  std::exception_ptr err;
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), m = omp_get_num_threads();
    try {
      f(n * t / m, n * (t + 1) / m);
    } catch (...) {
#pragma omp critical(kiln_conv2d_taps_split)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace

template <typename T>
void taps_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace) {
  if (d.N == 0) return;
  T* wt = static_cast<T*>(workspace);
  const Bufs<T> b = carve<T>(d, wt + taps_wt_elems(d));
  const int64_t N = d.N, K = d.K, C = d.C, P = d.out_h() * d.out_w(), ld_w = d.R * d.S * C;
  gather(x, N, C, d.H * d.W, b.xg);
  for_each_channel_share(K, [&](int64_t k0, int64_t k1) {
    const int64_t kn = k1 - k0;
    transpose_taps(d, w, wt, true, k0, k1, int64_t(0), C);  // the rows of Wt this share's GEMMs read
    // Runs come in output-pixel order: the first of a pixel overwrites its rows of yg (beta 0), the
    // others add; a pixel no kernel row meets (padding only) gets 0 (+ bias).
    auto zero = [&](int64_t o) { std::fill(b.yg + o * K * N + k0 * N, b.yg + o * K * N + k1 * N, T(0)); };
    int64_t next = 0;  // the first output pixel not yet written
    for_each_run(d, [&](const Run& run) {
      for (; next < run.o; ++next) zero(next);
      const bool first = next == run.o;
      if (first) next = run.o + 1;
      gemm<T>(false, false, kn, N, run.ns * C, T(1), wt + k0 * ld_w + run.tap0 * C, ld_w, b.xg + run.in0 * C * N,
              N, first ? T(0) : T(1), b.yg + run.o * K * N + k0 * N, N);
    });
    for (; next < P; ++next) zero(next);
    scatter(b.yg, N, K, P, bias, y, k0, k1);
  });
}

template <typename T>
void taps_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace) {
  if (d.N == 0) return;
  T* wt = static_cast<T*>(workspace);
  const Bufs<T> b = carve<T>(d, wt + taps_wt_elems(d));
  const int64_t N = d.N, K = d.K, C = d.C, HW = d.H * d.W, ld_w = d.R * d.S * C;
  gather(dy, N, K, d.out_h() * d.out_w(), b.yg);
  for_each_channel_share(C, [&](int64_t c0, int64_t c1) {
    const int64_t cn = c1 - c0;
    transpose_taps(d, w, wt, true, int64_t(0), K, c0, c1);  // the columns of Wt this share's GEMMs read
    for (int64_t i = 0; i < HW; ++i) std::fill(b.xg + (i * C + c0) * N, b.xg + (i * C + c1) * N, T(0));
    if (cn == C) {  // all channels: the taps of a run are one GEMM
      for_each_run(d, [&](const Run& run) {
        gemm<T>(true, false, run.ns * C, N, K, T(1), wt + run.tap0 * C, ld_w, b.yg + run.o * K * N, N, T(1),
                b.xg + run.in0 * C * N, N);
      });
    } else {
      for_each_run(d, [&](const Run& run) {  // a share of the channels: one GEMM per tap
        for (int64_t s = 0; s < run.ns; ++s)
          gemm<T>(true, false, cn, N, K, T(1), wt + (run.tap0 + s) * C + c0, ld_w, b.yg + run.o * K * N, N, T(1),
                  b.xg + ((run.in0 + s) * C + c0) * N, N);
      });
    }
    scatter<T>(b.xg, N, C, HW, nullptr, dx, c0, c1);
  });
}

template <typename T>
void taps_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, void* workspace) {
  T* dwt = static_cast<T*>(workspace);
  const Bufs<T> b = carve<T>(d, dwt + taps_wt_elems(d));
  const int64_t N = d.N, K = d.K, C = d.C, ld_w = d.R * d.S * C;
  if (N > 0) gather(x, N, C, d.H * d.W, b.xg, dy, K, d.out_h() * d.out_w(), b.yg);
  for_each_channel_share(K, [&](int64_t k0, int64_t k1) {
    std::fill(dwt + k0 * ld_w, dwt + k1 * ld_w, T(0));
    if (N > 0)
      for_each_run(d, [&](const Run& run) {
        gemm<T>(false, true, k1 - k0, run.ns * C, N, T(1), b.yg + run.o * K * N + k0 * N, N, b.xg + run.in0 * C * N,
                N, T(1), dwt + k0 * ld_w + run.tap0 * C, ld_w);
      });
    transpose_taps(d, dwt, dw, false, k0, k1, int64_t(0), C);  // the rows this share wrote
  });
}

#define KILN_INSTANTIATE_CONV2D_TAPS(T)                                                          \
  template void taps_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*);     \
  template void taps_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);        \
  template void taps_backward_weight<T>(const Conv2dDesc&, const T*, const T*, T*, void*);
KILN_INSTANTIATE_CONV2D_TAPS(float)
KILN_INSTANTIATE_CONV2D_TAPS(double)
#undef KILN_INSTANTIATE_CONV2D_TAPS

}  // namespace kiln::cpu
