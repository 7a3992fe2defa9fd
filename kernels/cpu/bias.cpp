// CPU bias add / bias gradient (see bias.h): a loop over channels, the element order of bias_math.h.
#include "kernels/cpu/bias.h"

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "kernels/common/bias_math.h"

namespace kiln::cpu {
namespace {

template <typename T> struct Acc { using type = float; };  // compute type of bias_add (16-bit: f32)
template <> struct Acc<double> { using type = double; };

template <typename T>
void add_t(int64_t outer, int64_t K, int64_t inner, T* y, const T* b) {
  using C = typename Acc<T>::type;
  const int64_t count = outer * inner;
  for (int64_t k = 0; k < K; ++k) {
    const C bk = (C)b[k];
    for (int64_t j = 0; j < count; ++j) {
      T& v = y[bias_math::elem_offset(j, k, K, inner)];
      v = T((C)v + bk);
    }
  }
}

template <typename T>
void grad_t(int64_t outer, int64_t K, int64_t inner, const T* dy, T* db) {
  using C = typename Acc<T>::type;
  const int64_t count = outer * inner;
  for (int64_t k = 0; k < K; ++k) {
    double s = 0.0;
    for (int64_t j = 0; j < count; ++j) s += (double)(C)dy[bias_math::elem_offset(j, k, K, inner)];
    db[k] = T((C)s);
  }
}

void check_args(const char* op, DType dt, int64_t outer, int64_t K, int64_t inner) {
  KILN_CHECK(outer >= 0 && K >= 0 && inner >= 0, op, " on cpu: negative size (outer ", outer, ", K ", K, ", inner ",
             inner, ")");
  KILN_CHECK(dt == DType::f16 || dt == DType::bf16 || dt == DType::f32 || dt == DType::f64, op, " on cpu: dtype ",
             dtype_name(dt), " not supported (f16, bf16, f32, f64)");
}

}  // namespace

void bias_add(DType dt, int64_t outer, int64_t K, int64_t inner, void* y, const void* b) {
  check_args("bias_add", dt, outer, K, inner);
  switch (dt) {
    case DType::f16: return add_t(outer, K, inner, (half*)y, (const half*)b);
    case DType::bf16: return add_t(outer, K, inner, (bfloat16*)y, (const bfloat16*)b);
    case DType::f32: return add_t(outer, K, inner, (float*)y, (const float*)b);
    default: return add_t(outer, K, inner, (double*)y, (const double*)b);
  }
}

void bias_grad(DType dt, int64_t outer, int64_t K, int64_t inner, const void* dy, void* db) {
  check_args("bias_grad", dt, outer, K, inner);
  switch (dt) {
    case DType::f16: return grad_t(outer, K, inner, (const half*)dy, (half*)db);
    case DType::bf16: return grad_t(outer, K, inner, (const bfloat16*)dy, (bfloat16*)db);
    case DType::f32: return grad_t(outer, K, inner, (const float*)dy, (float*)db);
    default: return grad_t(outer, K, inner, (const double*)dy, (double*)db);
  }
}

}  // namespace kiln::cpu
