#include "kernels/cpu/reduce.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "engine/core/half.h"

namespace kiln::cpu {
namespace {

template <typename T>
void reduce_t(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = x + r * cols;
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean: {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc += (double)p[c];
        out[r] = T(op == ReduceOp::mean ? acc / (double)cols : acc);
        break;
      }
      case ReduceOp::var:
      case ReduceOp::var_unbiased: {
        double m = 0;
        for (int64_t c = 0; c < cols; ++c) m += (double)p[c];
        m /= (double)cols;
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) {
          double d = (double)p[c] - m;
          s += d * d;
        }
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
