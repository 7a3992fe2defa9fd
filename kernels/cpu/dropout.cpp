// Dropout kernels (see dropout.h). Chunks of 4 elements share one Philox call. The per-element
// rule (kernels/common/dropout_math.h) multiplies dropped elements by 0, so NaN propagates.
#include "kernels/cpu/dropout.h"

#include "engine/core/error.h"
#include "engine/core/philox.h"
#include "kernels/common/dropout_math.h"

namespace kiln::cpu {

namespace {
double keep_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }
}  // namespace

template <typename T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t offset, T* y, uint8_t* mask) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_forward: p must be in [0, 1], got ", p);
  KILN_CHECK(n >= 0, "dropout_forward: bad size ", n);
  const T scale = (T)keep_scale(p);
  const float pf = (float)p;
  const int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t gi = 0; gi < groups; ++gi) {
    // Elements 4*gi .. 4*gi+3 use counter offset + gi (philox_word's convention).
    const uint64_t ctr = offset + (uint64_t)gi;
    Philox4 c = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), 0u, 0u}};
    Philox4 r = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = gi * 4 + k;
      if (i >= n) break;
      const float u = (float)(r.v[k] >> 8) * (1.0f / 16777216.0f);  // == philox_uniform(seed, offset, i)
      const bool keep = u >= pf;
      y[i] = dropout_apply(x[i], keep, scale);  // a dropped NaN stays NaN, as in torch
      if (mask) mask[i] = keep ? 1 : 0;
    }
  }
}

template <typename T>
void dropout_backward(int64_t n, const T* dy, const uint8_t* mask, double p, T* dx) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_backward: p must be in [0, 1], got ", p);
  KILN_CHECK(mask != nullptr || n == 0, "dropout_backward: the forward's mask is required");
  const T scale = (T)keep_scale(p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = dropout_apply(dy[i], mask[i] != 0, scale);
}

template void dropout_forward<float>(int64_t, const float*, double, uint64_t, uint64_t, float*, uint8_t*);
template void dropout_forward<double>(int64_t, const double*, double, uint64_t, uint64_t, double*, uint8_t*);
template void dropout_backward<float>(int64_t, const float*, const uint8_t*, double, float*);
template void dropout_backward<double>(int64_t, const double*, const uint8_t*, double, double*);

}  // namespace kiln::cpu
