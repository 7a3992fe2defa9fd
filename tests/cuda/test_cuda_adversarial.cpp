// Issue 33's adversarial cases at the engine level, tensors on cuda:0 against the same ops on the CPU:
// casts of NaN / +-inf / -0 / out-of-range f32, f16 and bf16 to i32, i64 and u8 (exactly the one rule of
// kernels/common/float_to_int.h); -0 through relu, max, min, abs, neg and copies (sign bits); empty
// tensors through every op family; lengths 1..70 and around 4096 (not multiples of 32 nor of the vector
// width); contiguous-but-misaligned f16 views (narrow by one element: the vector path's alignment fails,
// the scalar path runs); non-contiguous views (transpose, stride-2 slices); the f16 matmul under --amp
// with M, N or K = 0, K = 1, 15, 17 and f16 overflow in the output; the f16 conv (autocast) with K =
// Cin*kh*kw not a multiple of 16. Runs on a real GPU (kiln_tests_cuda, tools/gpu-check) and in the CPU
// execution mode (kiln_tests_cuda_cpu, --kernels kiln: tests/cuda_cpu/cuda_suite_in_cpu_mode.cpp).
// Exact comparisons where the op is exact (copies, casts, max/min, relu/abs/neg, and GEMM / conv sums of
// multiples of 1/4 that f32 holds exactly in any order, rounded once to f16); a dtype-sized tolerance
// otherwise. f16 overflow cases have exact results >= 2 x 65504 (inf) or <= 65504 / 2 (finite), so no
// accumulation order decides them. Without a GPU each test prints "cuda tests skipped: <reason>".
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "kernels/common/float_to_int.h"
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

const double kNaN = std::nan("");

std::vector<double> f64_values(const Tensor& t) { return t.to_vector<double>(); }

// Same shape, and every element bit-equal in value and sign (NaN where the CPU has NaN).
void check_bits(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  const Tensor g = back(gpu);
  REQUIRE(g.sizes() == cpu.sizes());
  REQUIRE(g.dtype() == cpu.dtype());
  const std::vector<double> a = f64_values(cpu), b = f64_values(g);
  int bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
    if (!same && bad++ == 0) first = i;
  }
  INFO(bad << " of " << a.size() << " differ; first at " << first << ": cpu " << (a.empty() ? 0 : a[first])
            << " gpu " << (b.empty() ? 0 : b[first]));
  CHECK(bad == 0);
}

// |cpu - gpu| <= tol * max(1, |cpu|), NaN / inf exactly where the CPU has them.
void check_near(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  const Tensor g = back(gpu);
  REQUIRE(g.sizes() == cpu.sizes());
  const std::vector<double> a = f64_values(cpu), b = f64_values(g);
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    if (std::isnan(a[i])) ok = std::isnan(b[i]);
    else if (std::isinf(a[i])) ok = a[i] == b[i];
    else ok = std::fabs(a[i] - b[i]) <= tol * std::max(1.0, std::fabs(a[i]));
    bad += !ok;
  }
  INFO(bad << " of " << a.size() << " outside tolerance " << tol);
  CHECK(bad == 0);
}

double tol_of(DType dt) {
  switch (dt) {
    case DType::f16: return 2e-3;
    case DType::bf16: return 1.6e-2;
    case DType::f32: return 1e-5;
    default: return 1e-12;
  }
}

Tensor make(const std::vector<double>& v, const Shape& s, DType dt) { return to_dtype(tensor_from(v, s), dt); }

// n values of k/4, k in [-lo4, hi4]: sums of their products are exact in f32 in any order.
std::vector<double> quarters(int64_t n, int lo4, int hi4, uint32_t seed) {
  std::vector<double> v((size_t)n);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (double)((int)((s >> 8) % (uint32_t)(hi4 + lo4 + 1)) - lo4) / 4.0;
  }
  return v;
}

// Mixed values with the specials, n of them.
std::vector<double> adversarial(int64_t n, uint32_t seed) {
  std::vector<double> v = quarters(n, 12, 12, seed);
  const double sp[] = {kNaN, INFINITY, -INFINITY, -0.0, 0.0, 1e-8, -3.5};
  for (size_t i = 0; i < v.size(); i += 5) v[i] = sp[(i / 5) % 7];
  return v;
}

template <typename I>
void check_cast(DType src, DType dst, const std::vector<double>& vals, bool misaligned) {
  const int64_t n = (int64_t)vals.size();
  // The source, rounded to its dtype on the cpu; misaligned: one element of padding in front.
  std::vector<double> padded = vals;
  if (misaligned) padded.insert(padded.begin(), 7.0);
  Tensor base = make(padded, {(int64_t)padded.size()}, src);
  Tensor cpu_src = misaligned ? narrow(base, 0, 1, n) : base;
  Tensor gpu_base = to_device(base, kGpu);
  Tensor gpu_src = misaligned ? narrow(gpu_base, 0, 1, n) : gpu_base;
  const std::vector<double> exact = cpu_src.to_vector<double>();  // f32/f16/bf16 -> f64 is exact
  std::vector<I> want(exact.size());
  for (size_t i = 0; i < exact.size(); ++i) want[i] = float_to_int<I>(exact[i]);
  const std::vector<I> on_cpu = to_dtype(cpu_src, dst).template to_vector<I>();
  const std::vector<I> on_gpu = back(to_dtype(gpu_src, dst)).template to_vector<I>();
  REQUIRE(on_gpu.size() == want.size());
  int bad_cpu = 0, bad_gpu = 0;
  size_t first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    bad_cpu += on_cpu[i] != want[i];
    if (on_gpu[i] != want[i] && bad_gpu++ == 0) first = i;
  }
  INFO(std::string(dtype_name(src)) << " -> " << std::string(dtype_name(dst)) << (misaligned ? " (misaligned view)" : "") << ": first gpu "
                       << "difference at " << first << " value " << exact[first] << " gpu " << (int64_t)on_gpu[first]
                       << " want " << (int64_t)want[first]);
  CHECK(bad_cpu == 0);
  CHECK(bad_gpu == 0);
}

}  // namespace

TEST_CASE("cuda: casts of NaN, inf, -0 and out-of-range floats to i32, i64 and u8 follow float_to_int exactly") {
  if (skip_without_gpu()) return;
  std::vector<double> v = {kNaN,  INFINITY,  -INFINITY, -0.0,   0.0,     0.75,       -0.75,       -1.5,
                           254.9, 255.5,     256.0,     300.0,  -300.0,  65504.0,    -65504.0,    2147483520.0,
                           2147483648.0, -2147483648.0, -2147483904.0, 1e10, -1e10, 9.2e18, 9.3e18, -9.3e18,
                           3e38, -3e38, 1e-40, 127.99};
  while (v.size() < 70) v.push_back((double)v.size() * 7.25 - 200.0);  // 70: not a multiple of the vector width
  for (DType src : {DType::f32, DType::f16, DType::bf16}) {
    for (bool mis : {false, true}) {
      check_cast<int32_t>(src, DType::i32, v, mis);
      check_cast<int64_t>(src, DType::i64, v, mis);
      check_cast<uint8_t>(src, DType::u8, v, mis);
    }
  }
}

TEST_CASE("cuda: -0 keeps its sign bit through relu, max, min, abs, neg and copies as on the CPU") {
  if (skip_without_gpu()) return;
  const int64_t n = 37;
  std::vector<double> z((size_t)n), o((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    z[(size_t)i] = i % 2 ? -0.0 : 0.0;
    o[(size_t)i] = i % 3 ? 0.0 : -0.0;
  }
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(std::string(dtype_name(dt)));
    const Tensor a = make(z, {n}, dt), b = make(o, {n}, dt);
    const Tensor ga = to_device(a, kGpu), gb = to_device(b, kGpu);
    check_bits(a, ga, "copy to the device and back");
    check_bits(clone(a), clone(ga), "clone");
    check_bits(relu(a), relu(ga), "relu");
    check_bits(abs(a), abs(ga), "abs");
    check_bits(neg(a), neg(ga), "neg");
    check_bits(maximum(a, b), maximum(ga, gb), "maximum");
    check_bits(minimum(a, b), minimum(ga, gb), "minimum");
    check_bits(to_dtype(a, DType::f32), to_dtype(ga, DType::f32), "cast to f32");
    // The copies must keep -0 (no arithmetic on the way).
    const std::vector<double> got = back(ga).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) CHECK(std::signbit(got[(size_t)i]) == (i % 2 == 1));
  }
}

TEST_CASE("cuda: empty tensors through every op family give the CPU's empty or zero results") {
  if (skip_without_gpu()) return;
  for (DType dt : {DType::f32, DType::f16}) {
    INFO(std::string(dtype_name(dt)));
    for (const Shape& s : std::vector<Shape>{{0}, {0, 5}, {3, 0}}) {
      const Tensor a = zeros(s, dt), ga = zeros(s, dt, kGpu);
      check_bits(relu(a), relu(ga), "relu");
      check_bits(exp(a), exp(ga), "exp");
      check_bits(add(a, a), add(ga, ga), "add");
      check_bits(to_dtype(a, DType::i32), to_dtype(ga, DType::i32), "cast to i32");
      check_bits(contiguous(a), contiguous(ga), "contiguous");
      if (s.size() == 2) {
        check_bits(sum(a, {1}), sum(ga, {1}), "sum over the empty or full dim");
        check_bits(sum(a, {0}), sum(ga, {0}), "sum over dim 0");
        check_bits(contiguous(transpose(a, 0, 1)), contiguous(transpose(ga, 0, 1)), "transpose copy");
        check_bits(softmax(a, 1), softmax(ga, 1), "softmax");
      }
    }
    // GEMMs with an empty M and an empty K (the latter: zeros).
    check_bits(matmul(zeros({0, 4}, dt), ones({4, 3}, dt)), matmul(zeros({0, 4}, dt, kGpu), ones({4, 3}, dt, kGpu)),
               "matmul M = 0");
    check_bits(matmul(ones({3, 0}, dt), ones({0, 4}, dt)), matmul(ones({3, 0}, dt, kGpu), ones({0, 4}, dt, kGpu)),
               "matmul K = 0");
    check_bits(cat({zeros({0, 3}, dt), ones({2, 3}, dt)}), cat({zeros({0, 3}, dt, kGpu), ones({2, 3}, dt, kGpu)}),
               "cat with an empty part");
  }
}

TEST_CASE("cuda: elementwise, casts and reductions on lengths 1..70 and around 4096") {
  if (skip_without_gpu()) return;
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n = 4093; n <= 4099; ++n) lengths.push_back(n);
  for (DType dt : {DType::f32, DType::f16}) {
    for (int64_t n : lengths) {
      INFO(std::string(dtype_name(dt)) << " n = " << n);
      const Tensor a = make(adversarial(n, (uint32_t)n), {n}, dt), b = make(quarters(n, 8, 8, (uint32_t)n + 99), {n}, dt);
      const Tensor ga = to_device(a, kGpu), gb = to_device(b, kGpu);
      check_bits(relu(a), relu(ga), "relu");
      check_bits(abs(a), abs(ga), "abs");
      check_bits(add(a, b), add(ga, gb), "add");  // sums of quarters: exact
      check_bits(maximum(a, b), maximum(ga, gb), "maximum");
      check_bits(to_dtype(a, DType::i32), to_dtype(ga, DType::i32), "cast to i32");
      check_near(exp(b), exp(gb), tol_of(dt), "exp");
      check_bits(max(b), max(gb), "max");
      check_bits(min(a), min(ga), "min (NaN wins, as on the CPU)");
      check_near(sum(b), sum(gb), tol_of(dt), "sum");
    }
  }
}

TEST_CASE("cuda: contiguous-but-misaligned f16 views (narrow by one element) take the scalar path and match") {
  if (skip_without_gpu()) return;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int64_t n : {int64_t(7), int64_t(67), int64_t(4099)}) {
      INFO(std::string(dtype_name(dt)) << " n = " << n);
      const Tensor base = make(adversarial(n + 1, 5u), {n + 1}, dt), base2 = make(quarters(n + 1, 8, 8, 6u), {n + 1}, dt);
      const Tensor gbase = to_device(base, kGpu), gbase2 = to_device(base2, kGpu);
      const Tensor a = narrow(base, 0, 1, n), b = narrow(base2, 0, 1, n);
      const Tensor ga = narrow(gbase, 0, 1, n), gb = narrow(gbase2, 0, 1, n);
      REQUIRE(ga.is_contiguous());
      REQUIRE(reinterpret_cast<uintptr_t>(ga.data_ptr()) % 4 == 2);  // not even 4-byte aligned
      check_bits(contiguous(a), clone(ga), "clone");
      check_bits(relu(a), relu(ga), "relu");
      check_bits(neg(a), neg(ga), "neg");
      check_bits(add(a, b), add(ga, gb), "add");
      check_bits(minimum(a, b), minimum(ga, gb), "minimum");
      check_bits(to_dtype(a, DType::f32), to_dtype(ga, DType::f32), "cast to f32");
      check_bits(to_dtype(to_dtype(a, DType::f32), dt), to_dtype(to_dtype(ga, DType::f32), dt), "round trip");
      check_near(sum(b), sum(gb), tol_of(dt), "sum");
      check_bits(max(b), max(gb), "max");
    }
  }
}

TEST_CASE("cuda: non-contiguous views (transpose, stride-2 slices) through copies, elementwise ops and reductions") {
  if (skip_without_gpu()) return;
  for (DType dt : {DType::f32, DType::f16}) {
    INFO(std::string(dtype_name(dt)));
    const Tensor x = make(adversarial(33 * 70, 11u), {33, 70}, dt), y = make(quarters(70 * 33, 8, 8, 12u), {70, 33}, dt);
    const Tensor gx = to_device(x, kGpu), gy = to_device(y, kGpu);
    const Tensor xt = transpose(x, 0, 1), gxt = transpose(gx, 0, 1);
    REQUIRE_FALSE(gxt.is_contiguous());
    check_bits(contiguous(xt), contiguous(gxt), "transpose copy");
    check_bits(add(xt, y), add(gxt, gy), "add(transposed, contiguous)");
    check_bits(relu(xt), relu(gxt), "relu(transposed)");
    const Tensor s = slice(x, 1, 1, 70, 2), gs = slice(gx, 1, 1, 70, 2);
    check_bits(contiguous(s), contiguous(gs), "stride-2 slice copy");
    check_bits(maximum(s, slice(x, 1, 0, 70, 2)), maximum(gs, slice(gx, 1, 0, 70, 2)), "maximum of two slices");
    check_bits(to_dtype(s, DType::i64), to_dtype(gs, DType::i64), "cast of a slice to i64");
    const Tensor yt = transpose(y, 0, 1), gyt = transpose(gy, 0, 1);
    check_near(sum(yt, {1}), sum(gyt, {1}), tol_of(dt), "sum over a transposed dim");
    check_bits(max(slice(y, 0, 0, 70, 2)), max(slice(gy, 0, 0, 70, 2)), "max of a stride-2 slice");
    // f32 GEMMs are cuBLAS only (no kiln kernel): not in the CPU mode.
    if (dt == DType::f32 && !kiln_test::cpu_mode())
      check_near(matmul(yt, slice(y, 0, 0, 70, 1)), matmul(gyt, slice(gy, 0, 0, 70, 1)), 1e-5, "matmul(transposed, y)");
  }
}

TEST_CASE("cuda: f16 matmul under --amp with M, N or K = 0, K = 1, 15, 17 equals the CPU exactly") {
  if (skip_without_gpu()) return;
  struct Mnk { int64_t m, n, k; };
  for (Mnk c : {Mnk{0, 5, 7}, Mnk{5, 0, 7}, Mnk{5, 7, 0}, Mnk{3, 5, 1}, Mnk{17, 9, 15}, Mnk{9, 17, 17}, Mnk{33, 40, 17},
                Mnk{1, 1, 15}}) {
    INFO("M " << c.m << " N " << c.n << " K " << c.k);
    // Multiples of 1/4 up to 3: every f32 partial sum is exact, so the one f16 rounding decides alone.
    const Tensor a = make(quarters(c.m * c.k, 12, 12, 1u), {c.m, c.k}, DType::f32);
    const Tensor b = make(quarters(c.k * c.n, 12, 12, 2u), {c.k, c.n}, DType::f32);
    const Tensor ga = to_device(a, kGpu), gb = to_device(b, kGpu);
    AutocastGuard amp(true, DType::f16);
    const Tensor want = matmul(a, b), got = matmul(ga, gb);
    CHECK(got.dtype() == DType::f16);
    check_bits(want, got, "autocast matmul");
    check_bits(matmul(transpose(to_dtype(b, DType::f16), 0, 1), transpose(to_dtype(a, DType::f16), 0, 1)),
               matmul(transpose(to_dtype(gb, DType::f16), 0, 1), transpose(to_dtype(ga, DType::f16), 0, 1)),
               "f16 matmul of transposed operands");
  }
}

TEST_CASE("cuda: f16 matmul overflow: results >= 2 x 65504 are inf, results <= 65504 / 2 stay finite") {
  if (skip_without_gpu()) return;
  const int64_t M = 6, N = 9, K = 17;
  // Rows 0-1: 256 * 256 * 17 = 1114112 (inf); rows 2-3: -(...) (-inf); rows 4-5: 32 * 32 * 17 = 17408 (finite).
  std::vector<double> av((size_t)(M * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) av[(size_t)(i * K + k)] = i < 2 ? 256.0 : i < 4 ? -256.0 : 32.0 * (k % 2 ? 1 : -1);
  std::vector<double> bv((size_t)(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) bv[(size_t)(k * N + j)] = j < 5 ? 256.0 : 32.0 * (k % 2 ? 1 : -1);
  const Tensor a = make(av, {M, K}, DType::f16), b = make(bv, {K, N}, DType::f16);
  const Tensor got = back(matmul(to_device(a, kGpu), to_device(b, kGpu)));
  check_bits(matmul(a, b), matmul(to_device(a, kGpu), to_device(b, kGpu)), "matmul vs the CPU");
  const std::vector<double> g = got.to_vector<double>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      // Exact result of row i, column j, in f64.
      double r = 0;
      for (int64_t k = 0; k < K; ++k) r += av[(size_t)(i * K + k)] * bv[(size_t)(k * N + j)];
      const double v = g[(size_t)(i * N + j)];
      INFO("C[" << i << "][" << j << "] exact " << r << " got " << v);
      REQUIRE((std::fabs(r) >= 2 * 65504.0 || std::fabs(r) <= 65504.0 / 2));
      if (std::fabs(r) >= 2 * 65504.0) CHECK(v == (r > 0 ? INFINITY : -INFINITY));
      else CHECK(v == r);  // multiples of 32^2 up to 17408: exact in f16
    }
}

TEST_CASE("cuda: f16 conv2d (autocast) with K = Cin*kh*kw not a multiple of 16, forward and backward") {
  if (skip_without_gpu()) return;
  struct Cv { int64_t n, cin, h, cout, k, pad; };
  for (Cv c : {Cv{2, 3, 7, 5, 3, 1}, Cv{1, 1, 6, 3, 3, 0}, Cv{2, 5, 5, 4, 1, 0}, Cv{1, 2, 9, 17, 3, 1}}) {
    INFO("N " << c.n << " Cin " << c.cin << " H " << c.h << " Cout " << c.cout << " k " << c.k << " K = "
              << c.cin * c.k * c.k);
    REQUIRE((c.cin * c.k * c.k) % 16 != 0);
    const Tensor x = make(quarters(c.n * c.cin * c.h * c.h, 8, 8, 3u), {c.n, c.cin, c.h, c.h}, DType::f32);
    const Tensor w = make(quarters(c.cout * c.cin * c.k * c.k, 8, 8, 4u), {c.cout, c.cin, c.k, c.k}, DType::f32);
    const Tensor bias = make(quarters(c.cout, 8, 8, 5u), {c.cout}, DType::f32);
    struct Out { Tensor y, dx, dw, db; };
    auto run = [&](Device d) {
      Tensor xd = to_device(x, d).detach(), wd = to_device(w, d).detach(), bd = to_device(bias, d).detach();
      xd.set_requires_grad(true);
      wd.set_requires_grad(true);
      bd.set_requires_grad(true);
      Tensor y;
      {
        AutocastGuard amp(true, DType::f16);
        y = conv2d(xd, wd, bd, {1, 1}, {c.pad, c.pad});
      }
      // dy: quarters as well, so dx and dw are exact sums too.
      const Tensor dy = to_device(make(quarters(y.numel(), 4, 4, 7u), y.sizes(), y.dtype()), d);
      y.backward(dy);
      return Out{y.detach(), xd.grad(), wd.grad(), bd.grad()};
    };
    const Out cpu = run(Device::cpu()), gpu = run(kGpu);
    check_bits(cpu.y, gpu.y, "forward");
    check_bits(cpu.dx, gpu.dx, "dx");
    check_bits(cpu.dw, gpu.dw, "dw");
    check_bits(cpu.db, gpu.db, "dbias");
  }
}

#else  // neither a CUDA build nor the CPU mode

TEST_CASE("cuda: adversarial engine-level cases (backend not built)") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
