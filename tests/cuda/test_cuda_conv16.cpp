// 16-bit conv2d on the GPU (kernels/cuda/conv2d_16.h through the op layer) against the CPU's 16-bit
// rule (compute in f32, round on store): forward, input, weight and bias gradients, for cuDNN
// (--kernels vendor; f16 and bf16) and kiln's implicit GEMM (--kernels kiln; f16), NCHW and
// channels-last inputs, strides, padding, odd channel counts, and groups > 1 (kiln falls back to
// cuDNN). The GPU accumulates in f32 like the CPU, but in another order, and both round the result
// to 16 bits: they differ by about one 16-bit ulp of the largest values (f16 2^-11 ~ 4.9e-4, bf16
// 2^-8 ~ 3.9e-3, relative), so the bound is max|a - b| / max|a| <= 1e-2 for f16 and 3e-2 for bf16.
// Without a GPU each test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "support/cuda_test.h"
#include "kernels/common/cuda_backend.h"

using namespace kiln;
using kiln_test::skip_without_gpu;

namespace {

// --kernels vendor | kiln, through the backend in force (the real one, or the CPU mode, where only kiln's
// kernels exist: the vendor cases are left out there, kiln_test::cpu_mode()).
enum class Src { vendor, kiln };
const char* src_name(Src s) { return s == Src::kiln ? "kiln" : "vendor"; }
void set_source(Src s) { cuda_backend_or_throw().set_kernels_kiln(s == Src::kiln); }
// The sources a test runs here: both on a GPU, kiln's in the CPU mode.
std::vector<Src> sources() {
  if (kiln_test::cpu_mode()) return {Src::kiln};
  return {Src::vendor, Src::kiln};
}

// Sets the process-wide kernel source for one scope, restoring vendor (the default; kiln in the CPU mode) after.
struct KernelSourceScope {
  explicit KernelSourceScope(Src s) { set_source(s); }
  ~KernelSourceScope() { set_source(kiln_test::cpu_mode() ? Src::kiln : Src::vendor); }
};

double rel_err(const Tensor& ref, const Tensor& got) {
  std::vector<double> a = ref.to_vector<double>(), b = got.to_vector<double>();
  REQUIRE(a.size() == b.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(a[i]));
  }
  return num / den;
}

struct Case {
  int64_t N, C, H, W, K, R, S, stride, pad, groups;
  bool bias;
};

struct Result {
  Tensor y, dx, dw, db;
};

// conv2d of 16-bit copies of x, w, b on `dev`, then backward of sum(y * seed).
Result run(const Case& k, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& seed, DType dt, Device dev,
           bool channels_last) {
  Tensor xd = to_device(to_dtype(x, dt), dev), wd = to_device(to_dtype(w, dt), dev);
  Tensor bd = k.bias ? to_device(to_dtype(b, dt), dev) : Tensor();
  if (channels_last) xd = contiguous(xd, MemoryFormat::channels_last);
  xd = xd.detach();
  xd.set_requires_grad(true);
  wd.set_requires_grad(true);
  if (bd.defined()) bd.set_requires_grad(true);
  Tensor y = conv2d(xd, wd, bd, {k.stride, k.stride}, {k.pad, k.pad}, {1, 1}, k.groups);
  if (dev.is_cuda() && channels_last) CHECK(is_channels_last(y));  // cuda keeps the input's format
  if (dev.is_cuda() && !channels_last) CHECK(y.is_contiguous());
  sum(mul(to_dtype(y, DType::f32), to_device(seed, dev))).backward();
  Result r;
  auto cpu = [](const Tensor& t) { return t.defined() ? to_device(contiguous(t.detach()), Device::cpu()) : Tensor(); };
  r.y = cpu(y);
  r.dx = cpu(xd.grad());
  r.dw = cpu(wd.grad());
  r.db = bd.defined() ? cpu(bd.grad()) : Tensor();
  CHECK(xd.grad().dtype() == dt);
  CHECK(wd.grad().dtype() == dt);
  return r;
}

void check_case(const Case& k, DType dt, Src src, bool channels_last) {
  manual_seed(17);
  Tensor x = uniform({k.N, k.C, k.H, k.W}, -1, 1);
  Tensor w = uniform({k.K, k.C / k.groups, k.R, k.S}, -0.5, 0.5);
  Tensor b = uniform({k.K}, -0.5, 0.5);
  const int64_t P = (k.H + 2 * k.pad - k.R) / k.stride + 1, Q = (k.W + 2 * k.pad - k.S) / k.stride + 1;
  Tensor seed = uniform({k.N, k.K, P, Q}, -1, 1);
  Result ref = run(k, x, w, b, seed, dt, Device::cpu(), false);
  Result got;
  {
    KernelSourceScope scope(src);
    got = run(k, x, w, b, seed, dt, Device::cuda(0), channels_last);
  }
  const double tol = dt == DType::f16 ? 1e-2 : 3e-2;
  INFO(std::string(dtype_name(dt)) << " " << src_name(src) << (channels_last ? " channels-last" : " NCHW")
                      << " x (" << k.N << ", " << k.C << ", " << k.H << ", " << k.W << ") w (" << k.K << ", "
                      << k.C / k.groups << ", " << k.R << ", " << k.S << ") stride " << k.stride << " pad " << k.pad
                      << " groups " << k.groups);
  CHECK(rel_err(ref.y, got.y) <= tol);
  CHECK(rel_err(ref.dx, got.dx) <= tol);
  CHECK(rel_err(ref.dw, got.dw) <= tol);
  if (k.bias) CHECK(rel_err(ref.db, got.db) <= tol);
}

const Case kCases[] = {
    {2, 16, 9, 9, 32, 3, 3, 1, 1, 1, true},     // vector path (C, K multiples of 8), bias
    {2, 64, 14, 14, 64, 3, 3, 2, 1, 1, false},  // ResNet-like stride-2 3x3
    {3, 3, 20, 20, 16, 7, 7, 2, 3, 1, false},   // stem-like: 3 channels (element copies)
    {2, 32, 8, 8, 64, 1, 1, 2, 0, 1, false},    // 1x1 downsample
    {2, 5, 7, 9, 6, 3, 3, 1, 1, 1, true},       // ragged edges everywhere
    {2, 16, 8, 8, 16, 3, 3, 1, 1, 4, true},     // groups 4: cuDNN on both sources
};

}  // namespace

#if !defined(KILN_CUDA_TESTS_IN_CPU_MODE)  // cuDNN: GPU only
TEST_CASE("cuda: f16 conv2d forward and backward, cuDNN (vendor), NCHW and channels-last, vs CPU f16") {
  if (skip_without_gpu()) return;
  for (const Case& k : kCases)
    for (bool cl : {false, true}) check_case(k, DType::f16, Src::vendor, cl);
}

TEST_CASE("cuda: bf16 conv2d forward and backward, cuDNN, NCHW and channels-last, vs CPU bf16") {
  if (skip_without_gpu()) return;
  for (const Case& k : kCases)
    for (bool cl : {false, true}) check_case(k, DType::bf16, Src::vendor, cl);
}
#endif

TEST_CASE("cuda: f16 conv2d forward and backward, kiln implicit GEMM (--kernels kiln), NCHW and channels-last") {
  if (skip_without_gpu()) return;
  for (const Case& k : kCases) {
    if (k.groups != 1 && kiln_test::cpu_mode()) continue;  // groups > 1 falls back to cuDNN: GPU only
    // The 64-channel case is 60% of this test's time in the CPU mode (every mma emulated; 80 s under ASan):
    // stride 2, 3x3 and channel counts that are multiples of 8 stay covered by the others there.
    if (k.C == 64 && kiln_test::cpu_mode()) continue;
    for (bool cl : {false, true}) check_case(k, DType::f16, Src::kiln, cl);
  }
}

// A ResNet basic block under f16 autocast on the GPU (conv, batch_norm in f32, relu, residual add,
// max pool, flatten, linear), channels-last input, against the CPU's NCHW run: the channels-last
// kernels paths (cuDNN NHWC or kiln, batch_norm's (N*H*W, C) view, pools through a copy) give the
// CPU's values and gradients within f16 rounding.
TEST_CASE("cuda: channels-last block under f16 autocast equals the CPU (vendor and kiln kernels)") {
  if (skip_without_gpu()) return;
  for (Src src : sources()) {
    auto block = [](Device dev, bool cl, Tensor* dx, Tensor* dw) {
      manual_seed(23);
      Tensor x = to_device(uniform({4, 16, 12, 12}, -1, 1), dev), w = to_device(uniform({16, 16, 3, 3}, -0.3, 0.3), dev);
      Tensor g = to_device(ones({16}), dev), b = to_device(zeros({16}), dev), fc = to_device(uniform({10, 576}, -0.1, 0.1), dev);
      if (cl) x = contiguous(x, MemoryFormat::channels_last);
      x = x.detach();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor logits;
      {
        AutocastGuard ac(true);
        Tensor y = relu(batch_norm(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), g, b, Tensor(), Tensor(), true, 0.1, 1e-5));
        y = add(y, to_dtype(x, y.dtype()));
        if (dev.is_cuda() && cl) CHECK(is_channels_last(y));
        y = max_pool2d(y, {2, 2});
        logits = linear(flatten(y, 1), fc);
      }
      Tensor l32 = to_dtype(logits, DType::f32);
      sum(mul(l32, l32)).backward();
      *dx = to_device(contiguous(x.grad()), Device::cpu());
      *dw = to_device(contiguous(w.grad()), Device::cpu());
      return to_device(l32.detach(), Device::cpu());
    };
    Tensor rdx, rdw, gdx, gdw;
    Tensor ref = block(Device::cpu(), false, &rdx, &rdw);
    Tensor got;
    {
      KernelSourceScope scope(src);
      got = block(Device::cuda(0), true, &gdx, &gdw);
    }
    INFO("kernels " << std::string(src_name(src)));
    CHECK(rel_err(ref, got) <= 1e-2);
    CHECK(rel_err(rdx, gdx) <= 1e-2);
    CHECK(rel_err(rdw, gdw) <= 1e-2);
  }
}

TEST_CASE("cuda: f16 matmul on kiln's hgemm (--kernels kiln) equals cuBLAS within f16 rounding") {
  if (skip_without_gpu()) return;
  manual_seed(5);
  Tensor a = to_dtype(uniform({3, 37, 70}, -1, 1), DType::f16), b = to_dtype(uniform({70, 45}, -1, 1), DType::f16);
  Tensor ag = to_device(a, Device::cuda(0)), bg = to_device(b, Device::cuda(0));
  Tensor cpu_ref = matmul(a, b), cpu_t = matmul(transpose(b, 0, 1), transpose(a, 1, 2));
  Tensor kiln_out, kiln_t;
  {
    KernelSourceScope scope(Src::kiln);
    kiln_out = to_device(matmul(ag, bg), Device::cpu());
    // A transposed operand goes through the transpose flag, not a copy.
    kiln_t = to_device(matmul(transpose(bg, 0, 1), transpose(ag, 1, 2)), Device::cpu());
  }
  CHECK(rel_err(cpu_ref, kiln_out) <= 1e-2);
  CHECK(rel_err(cpu_t, kiln_t) <= 1e-2);
  if (kiln_test::cpu_mode()) return;  // cuBLAS: GPU only
  KernelSourceScope scope(Src::vendor);
  Tensor vendor = to_device(matmul(ag, bg), Device::cpu());
  Tensor tv = to_device(matmul(transpose(bg, 0, 1), transpose(ag, 1, 2)), Device::cpu());
  CHECK(rel_err(tv, kiln_t) <= 1e-2);
  CHECK(rel_err(vendor, kiln_out) <= 1e-2);
  CHECK(rel_err(cpu_ref, vendor) <= 1e-2);
}

#else

TEST_CASE("cuda: 16-bit conv2d not built") { MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)"); }

#endif
