// softmax / log_softmax kernels (see softmax.h). Max-subtracted for range; the row sums are
// accumulated in double.
#include "kernels/cpu/softmax.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace kiln::cpu {

namespace {

void check(int64_t rows, int64_t cols, const char* op) {
  KILN_CHECK(rows >= 0 && cols >= 1, op, ": bad sizes (rows ", rows, ", cols ", cols, ")");
}

// Row maximum used as the shift; a NaN anywhere makes the whole row NaN, as in PyTorch.
template <typename T>
T row_max(const T* x, int64_t cols) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < cols; ++j) {
    if (std::isnan(x[j])) return x[j];
    if (x[j] > m) m = x[j];
  }
  return m;
}
}  // namespace

template <typename T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  check(rows, cols, "softmax_forward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) {
      yr[j] = std::exp(xr[j] - m);
      s += (double)yr[j];
    }
    const T inv = (T)(1.0 / s);
    for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
  }
}

template <typename T>
void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  check(rows, cols, "log_softmax_forward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += (double)std::exp(xr[j] - m);
    const T lse = m + (T)std::log(s);
    for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] - lse;
  }
}

template <typename T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  check(rows, cols, "softmax_backward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* o = dx + r * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += (double)gr[j] * (double)yr[j];
    const T d = (T)dot;
    for (int64_t j = 0; j < cols; ++j) o[j] = yr[j] * (gr[j] - d);
  }
}

template <typename T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  check(rows, cols, "log_softmax_backward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* o = dx + r * cols;
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += (double)gr[j];
    const T sum = (T)s;
    for (int64_t j = 0; j < cols; ++j) o[j] = gr[j] - std::exp(yr[j]) * sum;
  }
}

#define KILN_INSTANTIATE_SOFTMAX(T)                                                         \
  template void softmax_forward<T>(int64_t, int64_t, const T*, T*);                        \
  template void log_softmax_forward<T>(int64_t, int64_t, const T*, T*);                    \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);             \
  template void log_softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
KILN_INSTANTIATE_SOFTMAX(float)
KILN_INSTANTIATE_SOFTMAX(double)
#undef KILN_INSTANTIATE_SOFTMAX

}  // namespace kiln::cpu
