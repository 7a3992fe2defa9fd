// CUDA backend against the CPU backend: every op that the op layer dispatches today, forward and
// backward, on random (and non-contiguous) inputs through the Tensor API: create on cpu, move to
// cuda:0, run, bring back, compare. Tolerances: f32 normwise relative error <= 1e-5, matmul and
// conv <= 1e-4 (TF32 off). Random draws and dropout masks must agree exactly. Without a GPU each
// test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;
using kiln_test::skip_without_gpu;
using kiln_test::kGpu;
using kiln_test::back;

namespace {

// max |a - b| / max(max |a|, 1e-30) over all elements (a: CPU reference, b: GPU result, on cpu).
double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(x[i]));
  }
  return num / den;
}

void check_close(const Tensor& cpu_ref, const Tensor& gpu, double tol, const std::string& what) {
  CHECK(gpu.device().is_cuda());
  Tensor b = back(gpu);
  REQUIRE(b.sizes() == cpu_ref.sizes());
  double e = rel_err(cpu_ref, b);
  INFO(what << ": relative error " << e);
  CHECK(e <= tol);
}

// Forward and backward of a unary function f on cpu and gpu; the backward seeds a random gradient.
template <typename F>
void check_unary_fn(const std::string& name, F f, const Tensor& x_cpu, double tol = 1e-5) {
  Tensor xc = x_cpu.detach();
  xc.set_requires_grad(true);
  Tensor xg = to_device(x_cpu.detach(), kGpu);
  xg.set_requires_grad(true);
  Tensor yc = f(xc), yg = f(xg);
  check_close(yc.detach(), yg, tol, name + " forward");
  Tensor g = uniform(yc.sizes(), -1, 1);
  if (!yc.requires_grad()) return;
  sum(mul(yc, g)).backward();
  sum(mul(yg, to_device(g, kGpu))).backward();
  REQUIRE(xg.grad().defined());
  check_close(xc.grad(), xg.grad(), tol, name + " backward");
}

template <typename F>
void check_binary_fn(const std::string& name, F f, const Tensor& a_cpu, const Tensor& b_cpu, double tol = 1e-5) {
  Tensor ac = a_cpu.detach(), bc = b_cpu.detach();
  ac.set_requires_grad(true);
  bc.set_requires_grad(true);
  Tensor ag = to_device(ac.detach(), kGpu), bg = to_device(bc.detach(), kGpu);
  ag.set_requires_grad(true);
  bg.set_requires_grad(true);
  Tensor yc = f(ac, bc), yg = f(ag, bg);
  check_close(yc.detach(), yg, tol, name + " forward");
  if (!yc.requires_grad()) return;
  Tensor g = uniform(yc.sizes(), -1, 1);
  sum(mul(yc, g)).backward();
  sum(mul(yg, to_device(g, kGpu))).backward();
  check_close(ac.grad(), ag.grad(), tol, name + " backward (a)");
  check_close(bc.grad(), bg.grad(), tol, name + " backward (b)");
}

}  // namespace

TEST_CASE("cuda: device discovery and round trip") {
  if (skip_without_gpu()) return;
  cuda::DeviceProps p = cuda::device_properties(0);
  MESSAGE("cuda:0 = " << p.name << ", cc " << p.cc_major << "." << p.cc_minor << ", "
                      << p.total_memory / (1 << 20) << " MiB");
  CHECK(p.total_memory > 0);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor x = to_dtype(uniform({3, 1000}, -4, 4), dt);
    Tensor y = back(to_device(x, kGpu));
    CHECK(rel_err(x, y) == 0.0);
  }
}

TEST_CASE("cuda: random draws equal the CPU's bit for bit") {
  if (skip_without_gpu()) return;
  // The kernels directly, with one (seed, offset) on both devices.
  for (int kind = 0; kind < 2; ++kind) {
    const int64_t n = 100003;
    Tensor c = empty({n});
    Tensor g = empty({n}, DType::f32, kGpu);
    cpu::random_fill(c.data_ptr(), DType::f32, n, kind, -1.0, 2.0, 1234, 77);
    cuda::random_fill(g.data_ptr(), DType::f32, n, kind, -1.0, 2.0, 1234, 77);
    double e = rel_err(c, back(g));
    INFO("kind " << kind << " error " << e);
    if (kind == 0) CHECK(e == 0.0);
    else CHECK(e <= 1e-6);  // normal: device log/cos may differ from glibc's in the last bit
  }
}

TEST_CASE("cuda: unary ops forward and backward") {
  if (skip_without_gpu()) return;
  Tensor x = uniform({37, 129}, -3, 3);
  Tensor pos = uniform({37, 129}, 0.1, 4);
  check_unary_fn("neg", [](const Tensor& t) { return neg(t); }, x);
  check_unary_fn("exp", [](const Tensor& t) { return exp(t); }, x);
  check_unary_fn("log", [](const Tensor& t) { return log(t); }, pos);
  check_unary_fn("sqrt", [](const Tensor& t) { return sqrt(t); }, pos);
  check_unary_fn("rsqrt", [](const Tensor& t) { return rsqrt(t); }, pos);
  check_unary_fn("abs", [](const Tensor& t) { return abs(t); }, x);
  check_unary_fn("relu", [](const Tensor& t) { return relu(t); }, x);
  check_unary_fn("leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.2); }, x);
  check_unary_fn("gelu", [](const Tensor& t) { return gelu(t); }, x);
  check_unary_fn("sigmoid", [](const Tensor& t) { return sigmoid(t); }, x);
  check_unary_fn("tanh", [](const Tensor& t) { return tanh(t); }, x);
  check_unary_fn("clamp", [](const Tensor& t) { return clamp(t, -1.0, 1.5); }, x);
  check_unary_fn("pow 3", [](const Tensor& t) { return pow(t, 3.0); }, x);
  check_unary_fn("add scalar", [](const Tensor& t) { return add(t, 0.5); }, x);
  check_unary_fn("mul scalar", [](const Tensor& t) { return mul(t, -1.5); }, x);
  check_unary_fn("rsub", [](const Tensor& t) { return rsub(t, 2.0); }, x);
  // Non-contiguous input (strided path) and an odd size with a misaligned start (scalar tail).
  check_unary_fn("exp of transpose", [](const Tensor& t) { return exp(transpose(t, 0, 1)); }, x);
  check_unary_fn("tanh of slice", [](const Tensor& t) { return tanh(narrow(t, 1, 3, 101)); }, x);
  check_unary_fn("f64 sigmoid", [](const Tensor& t) { return sigmoid(t); }, to_dtype(x, DType::f64));
}

TEST_CASE("cuda: binary ops with broadcasting, forward and backward") {
  if (skip_without_gpu()) return;
  Tensor a = uniform({8, 33, 17}, -2, 2), b = uniform({33, 1}, 0.5, 2), c = uniform({8, 33, 17}, 0.5, 2);
  check_binary_fn("add", [](const Tensor& x, const Tensor& y) { return add(x, y, 0.5); }, a, c);
  check_binary_fn("sub bcast", [](const Tensor& x, const Tensor& y) { return sub(x, y); }, a, b);
  check_binary_fn("mul bcast", [](const Tensor& x, const Tensor& y) { return mul(x, y); }, a, b);
  check_binary_fn("div", [](const Tensor& x, const Tensor& y) { return div(x, y); }, a, c);
  check_binary_fn("pow", [](const Tensor& x, const Tensor& y) { return pow(x, y); }, c, c);
  check_binary_fn("maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }, a, c);
  check_binary_fn("minimum bcast", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }, a, b);
  Tensor xc = rand({5, 7}), yc = rand({5, 7});
  check_close(gt(xc, yc), gt(to_device(xc, kGpu), to_device(yc, kGpu)), 0, "gt");
  check_close(lt(xc, yc), lt(to_device(xc, kGpu), to_device(yc, kGpu)), 0, "lt");
  Tensor cond = gt(xc, 0.5);
  check_close(where(cond, xc, yc), where(to_device(cond, kGpu), to_device(xc, kGpu), to_device(yc, kGpu)), 0,
              "where");
}

TEST_CASE("cuda: casts, fills and copies") {
  if (skip_without_gpu()) return;
  Tensor x = uniform({64, 65}, -300, 300);
  Tensor xg = to_device(x, kGpu);
  for (DType dt : {DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    check_close(to_dtype(x, dt), to_dtype(xg, dt), 0, std::string("cast f32 -> ") + dtype_name(dt));
  check_close(full({7, 9}, 3.25), full({7, 9}, 3.25, DType::f32, kGpu), 0, "full");
  check_close(contiguous(transpose(x, 0, 1)), contiguous(transpose(xg, 0, 1)), 0, "contiguous(transpose)");
}

TEST_CASE("cuda: reductions") {
  if (skip_without_gpu()) return;
  for (Shape s : {Shape{13, 7}, Shape{3, 5000}, Shape{1, 300000}}) {
    Tensor x = uniform(s, -1, 1);
    Tensor xg = to_device(x, kGpu);
    check_unary_fn("sum dim1", [](const Tensor& t) { return sum(t, {1}); }, x);
    check_unary_fn("mean dim0", [](const Tensor& t) { return mean(t, {0}); }, x);
    check_unary_fn("var", [](const Tensor& t) { return var(t, {1}); }, x);
    check_close(max(x, 1).values, max(xg, 1).values, 0, "max values");
    check_close(max(x, 1).indices, max(xg, 1).indices, 0, "max indices");
    check_close(min(x, 1).indices, min(xg, 1).indices, 0, "min indices");
    check_close(sum(x), sum(xg), 1e-5, "sum all");
  }
}

TEST_CASE("cuda: matmul (TF32 off) forward and backward") {
  if (skip_without_gpu()) return;
  check_binary_fn("matmul 2d", [](const Tensor& x, const Tensor& y) { return matmul(x, y); }, uniform({65, 129}, -1, 1),
                  uniform({129, 31}, -1, 1), 1e-4);
  check_binary_fn("matmul batched", [](const Tensor& x, const Tensor& y) { return matmul(x, y); },
                  uniform({4, 17, 33}, -1, 1), uniform({33, 9}, -1, 1), 1e-4);
  check_binary_fn("matmul transposed", [](const Tensor& x, const Tensor& y) { return matmul(transpose(x, 0, 1), y); },
                  uniform({40, 20}, -1, 1), uniform({40, 30}, -1, 1), 1e-4);
  check_binary_fn("matmul f64", [](const Tensor& x, const Tensor& y) { return matmul(x, y); },
                  uniform({20, 30}, -1, 1, DType::f64), uniform({30, 10}, -1, 1, DType::f64), 1e-12);
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: backend not built") { MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)"); }

#endif
