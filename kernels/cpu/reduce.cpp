#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "kernels/cpu/lanes.h"

namespace kiln::cpu {
namespace {

// Sums run in 8 double lanes (kernels/cpu/lanes.h). A row longer than 2 * kChunk is cut into chunks
// whose length depends only on the row's length; the chunks' sums are added in order, so the result
// does not depend on the thread count (the f32 step's finite check, a sum over all 11.7M ResNet18
// gradients, ran as one add chain: 18 ms of a 360 ms step at 32x64). It differs from a left-to-right
// double sum by rounding only.
constexpr int64_t kChunk = 1 << 15;
constexpr int64_t kMaxChunks = 256;

// sum of (p[i] - shift)^2 when Squares, else of p[i], over n values, in double
template <bool Squares, typename T>
double lane_sum(const T* p, int64_t n, double shift) {
  lanes::Lanes acc = {0, 0, 0, 0, 0, 0, 0, 0};
  if constexpr (Squares) lanes::add_centered_squares(p, n, shift, acc);
  else lanes::add_run(p, n, acc);
  return lanes::fold(acc);
}

// lane_sum over a whole row; a long row in chunks, summed by the threads when `parallel`
template <bool Squares, typename T>
double row_sum(const T* p, int64_t n, double shift, bool parallel) {
  if (n < 2 * kChunk) return lane_sum<Squares>(p, n, shift);
  const int64_t chunk = std::max(kChunk, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  double part[kMaxChunks];
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t k = 0; k < chunks; ++k)
    part[k] = lane_sum<Squares>(p + k * chunk, std::min(chunk, n - k * chunk), shift);
  double acc = 0;
  for (int64_t k = 0; k < chunks; ++k) acc += part[k];
  return acc;
}

// One row r of the reduction; its chunks are summed by the threads when `chunks_parallel`.
template <typename T>
void reduce_row(ReduceOp op, const T* x, int64_t r, int64_t cols, T* out, int64_t* idx, bool chunks_parallel) {
  const T* p = x + r * cols;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      const double acc = row_sum<false>(p, cols, 0.0, chunks_parallel);
      out[r] = T(op == ReduceOp::mean ? acc / (double)cols : acc);
      break;
    }
    case ReduceOp::var:
    case ReduceOp::var_unbiased: {
      const double m = row_sum<false>(p, cols, 0.0, chunks_parallel) / (double)cols;
      const double s = row_sum<true>(p, cols, m, chunks_parallel);
      double den = op == ReduceOp::var_unbiased ? (double)(cols - 1) : (double)cols;
      out[r] = T(den > 0 ? s / den : std::numeric_limits<double>::quiet_NaN());
      break;
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      int64_t best = 0;
      double bv = (double)p[0];
      for (int64_t c = 1; c < cols; ++c) {
        double v = (double)p[c];
        if (std::isnan(bv)) break;
        if (std::isnan(v) || (op == ReduceOp::max ? v > bv : v < bv)) {
          bv = v;
          best = c;
        }
      }
      out[r] = p[best];
      if (idx) idx[r] = best;
      break;
    }
  }
}

template <typename T>
void reduce_t(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  // One row (a full reduction): its chunks run in parallel, in row_sum's own region. It must not sit inside
  // the rows' region (even one made serial by its `if`): libgomp gives a region nested in another a team of
  // freshly created threads, not its pool, so every full sum (the f32 step's finite check, ~14 a ResNet18
  // step) started and ended a new thread. Several rows: the rows run in parallel, their chunks serially.
  if (rows == 1) return reduce_row(op, x, 0, cols, out, idx, true);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) reduce_row(op, x, r, cols, out, idx, false);
}

}  // namespace

void reduce_rows(ReduceOp op, DType dt, const void* x, int64_t rows, int64_t cols, void* out, int64_t* idx) {
  switch (dt) {
    case DType::f32: reduce_t(op, (const float*)x, rows, cols, (float*)out, idx); break;
    case DType::f64: reduce_t(op, (const double*)x, rows, cols, (double*)out, idx); break;
    case DType::f16: reduce_t(op, (const half*)x, rows, cols, (half*)out, idx); break;
    case DType::bf16: reduce_t(op, (const bfloat16*)x, rows, cols, (bfloat16*)out, idx); break;
    default: throw Error(str_cat("reduce: dtype ", dtype_name(dt), " not supported"));
  }
}

}  // namespace kiln::cpu
