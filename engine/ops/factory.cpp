// Tensor factories: constant fills, ranges and Philox random draws.
#include "engine/core/generator.h"
#include "engine/core/philox.h"
#include "engine/ops/dispatch.h"

namespace kiln {

Tensor full(const Shape& s, double value, DType dt, Device d) {
  Tensor t = empty(s, dt, d);
  launch_fill(t, value);
  return t;
}
Tensor zeros(const Shape& s, DType dt, Device d) { return full(s, 0.0, dt, d); }
Tensor ones(const Shape& s, DType dt, Device d) { return full(s, 1.0, dt, d); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }
Tensor scalar_tensor(double v, DType dt, Device d) { return full({}, v, dt, d); }

Tensor arange(int64_t n, DType dt, Device d) {
  KILN_CHECK(n >= 0, "arange: negative length ", n);
  Tensor t = empty({n}, DType::i64, Device::cpu());
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  if (dt != DType::i64) t = to_dtype(t, dt);
  return d.is_cpu() ? t : to_device(t, d);
}

static Tensor random_tensor(const Shape& s, int kind, double a, double b, DType dt, Device d) {
  KILN_CHECK(is_floating(dt), "random: dtype ", dtype_name(dt), " is not floating");
  Tensor t = empty(s, dt, d);
  int64_t n = t.numel();
  uint64_t draws = kind == 0 ? (uint64_t)n : 2 * (uint64_t)n;
  uint64_t offset = rng_reserve(draws);
  uint64_t seed = global_rng().seed;
  if (n > 0) KILN_DISPATCH(d, random_fill, t.data_ptr(), dt, n, kind, a, b, seed, offset);
  return t;
}

Tensor rand(const Shape& s, DType dt, Device d) { return random_tensor(s, 0, 0.0, 1.0, dt, d); }
Tensor randn(const Shape& s, DType dt, Device d) { return random_tensor(s, 1, 0.0, 1.0, dt, d); }
Tensor uniform(const Shape& s, double lo, double hi, DType dt, Device d) { return random_tensor(s, 0, lo, hi, dt, d); }
Tensor normal(const Shape& s, double mean, double std, DType dt, Device d) {
  return random_tensor(s, 1, mean, std, dt, d);
}

}  // namespace kiln
