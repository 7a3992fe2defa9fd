// Every GPU reduction against the CPU backend on the rows where a wrong empty value or a wrong
// combine rule shows (the reduce.cu bug of issue 15 returned column INT64_MAX for the max of an
// all-negative row): all-negative, all-positive, constant, NaN, +-inf, a single column, widths not a
// multiple of 32, rows longer than a block (> 4096 columns: the block path), in f32, f16, bf16 and
// f64. Max/min values and indices must equal the CPU's exactly (NaN where the CPU has NaN); sums,
// means and variances within a dtype-sized tolerance; isfinite_all (the loss scaler's found-inf) on
// all-ones, clean, one-inf and one-NaN tensors; softmax / log_softmax / cross-entropy on rows of
// large negative logits. Without a GPU each test prints "cuda tests skipped: <reason>" and passes.
// Never ran on a GPU so far.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

const double kNaN = std::nan("");

// Exact comparison that also requires NaN exactly where the reference has NaN.
void check_equal(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  REQUIRE(gpu.device().is_cuda());
  const std::vector<double> a = cpu.to_vector<double>(), b = back(gpu).to_vector<double>();
  REQUIRE(a.size() == b.size());
  int bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i];
    if (!same && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << a.size() << " differ; first at " << first << ": cpu "
            << (a.empty() ? 0 : a[first]) << " gpu " << (b.empty() ? 0 : b[first]));
  CHECK(bad == 0);
}

// |cpu - gpu| <= tol * max(1, |cpu|) per element, NaN/inf exactly where the CPU has them.
void check_near(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what) {
  REQUIRE(gpu.device().is_cuda());
  const std::vector<double> a = cpu.to_vector<double>(), b = back(gpu).to_vector<double>();
  REQUIRE(a.size() == b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    if (std::isnan(a[i])) ok = std::isnan(b[i]);
    else if (std::isinf(a[i])) ok = a[i] == b[i];
    else ok = std::fabs(a[i] - b[i]) <= tol * std::max(1.0, std::fabs(a[i]));
    bad += !ok;
  }
  INFO(what << ": " << bad << " of " << a.size() << " outside tolerance " << tol);
  CHECK(bad == 0);
}

// Tolerance of a 16-bit or f32 result computed in f64 and rounded once on each side: the two
// roundings may land one ulp apart.
double tol_of(DType dt) {
  switch (dt) {
    case DType::f16: return 2e-3;
    case DType::bf16: return 1.6e-2;
    case DType::f32: return 1e-6;
    default: return 1e-12;
  }
}

// (rows, cols) f64 values -> tensor of dtype dt on the cpu.
Tensor make(const std::vector<double>& v, int64_t rows, int64_t cols, DType dt) {
  return to_dtype(tensor_from(v, {rows, cols}), dt);
}

struct Case {
  std::string name;
  std::vector<double> v;
};

// Adversarial rows of `cols` columns, `rows` rows each.
std::vector<Case> cases(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  std::vector<Case> out;
  auto uni = [&](double lo, double hi) {
    return to_device(uniform({n}, lo, hi, DType::f64), Device::cpu()).to_vector<double>();
  };
  out.push_back({"all negative", uni(-9, -1)});
  out.push_back({"all positive", uni(1, 9)});
  out.push_back({"constant -3", std::vector<double>((size_t)n, -3.0)});
  out.push_back({"constant 2", std::vector<double>((size_t)n, 2.0)});
  out.push_back({"all ones", std::vector<double>((size_t)n, 1.0)});
  out.push_back({"all -inf", std::vector<double>((size_t)n, -INFINITY)});
  std::vector<double> nan = uni(-9, -1), inf = uni(1, 9), mixed = uni(-1, 1);
  for (int64_t r = 0; r < rows; ++r) {
    nan[(size_t)(r * cols + (cols - 1) * (r % 2))] = kNaN;  // last column on odd rows, first on even
    if (cols > 2) nan[(size_t)(r * cols + cols / 2)] = kNaN;
    inf[(size_t)(r * cols + (r * 7) % cols)] = r % 2 ? INFINITY : -INFINITY;
  }
  out.push_back({"NaN", nan});
  out.push_back({"inf", inf});
  out.push_back({"uniform(-1, 1)", mixed});
  return out;
}

}  // namespace

TEST_CASE("cuda: max/min values and indices on adversarial rows match the CPU exactly") {
  if (skip_without_gpu()) return;
  struct S {
    int64_t rows, cols;
  };
  for (S s : {S{13, 7}, S{5, 1}, S{3, 33}, S{4, 32}, S{2, 4096}, S{2, 4097}, S{3, 5000}, S{1, 10007}}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      for (const Case& c : cases(s.rows, s.cols)) {
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        CAPTURE(dtype_name(dt));
        CAPTURE(c.name);
        Tensor x = make(c.v, s.rows, s.cols, dt), xg = to_device(x, kGpu);
        auto mc = max(x, 1), mg = max(xg, 1), nc = min(x, 1), ng = min(xg, 1);
        check_equal(mc.values, mg.values, "max values");
        check_equal(mc.indices, mg.indices, "max indices");
        check_equal(nc.values, ng.values, "min values");
        check_equal(nc.indices, ng.indices, "min indices");
        check_equal(argmax(x, 1), argmax(xg, 1), "argmax");
        check_equal(max(x), max(xg), "max all");
        check_equal(min(x), min(xg), "min all");
        // both sides sum in f64 (orders differ by ~cols * 2^-53) and round once to dt
        const double tol = tol_of(dt) * (dt == DType::f64 ? (double)s.cols : 1.0);
        check_near(sum(x, {1}), sum(xg, {1}), tol, "sum");
        check_near(mean(x, {1}), mean(xg, {1}), tol, "mean");
        if (s.cols > 1) check_near(var(x, {1}), var(xg, {1}), tol * 10, "var");
      }
    }
  }
}

TEST_CASE("cuda: isfinite_all (found-inf) on all-ones, clean, one-inf and one-NaN tensors") {
  if (skip_without_gpu()) return;
  for (int64_t n : {1, 7, 32, 4096, 4097, 300001}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      CAPTURE(n);
      CAPTURE(dtype_name(dt));
      Tensor ones_t = to_dtype(full({n}, 1.0), dt);
      Tensor clean = to_dtype(uniform({n}, 0.5, 2.0), dt);  // all positive: the min of the mask is 1
      CHECK(back(isfinite_all(to_device(ones_t, kGpu))).item() == 1.0);
      CHECK(back(isfinite_all(to_device(clean, kGpu))).item() == 1.0);
      for (double bad : {(double)INFINITY, -(double)INFINITY, kNaN}) {
        std::vector<double> v = to_dtype(clean, DType::f64).to_vector<double>();
        v[(size_t)(n - 1)] = bad;
        Tensor t = to_dtype(tensor_from(v, {n}), dt);
        CHECK(back(isfinite_all(to_device(t, kGpu))).item() == 0.0);
      }
    }
  }
}

TEST_CASE("cuda: softmax, log_softmax and cross-entropy on large negative, constant and NaN rows") {
  if (skip_without_gpu()) return;
  for (int64_t cols : {1, 10, 33, 1000, 1025, 5000}) {
    for (const Case& c : cases(3, cols)) {
      CAPTURE(cols);
      CAPTURE(c.name);
      std::vector<double> v = c.v;
      for (double& e : v) e = std::isfinite(e) ? e * 100.0 : e;  // large logits: exp underflows without the max
      Tensor x = make(v, 3, cols, DType::f32), xg = to_device(x, kGpu);
      check_near(softmax(x, 1), softmax(xg, 1), 1e-5, "softmax");
      check_near(log_softmax(x, 1), log_softmax(xg, 1), 1e-5, "log_softmax");
      Tensor y = tensor_from(std::vector<int64_t>{0, cols - 1, cols / 2}, {3});
      check_near(cross_entropy(x, y), cross_entropy(xg, to_device(y, kGpu)), 1e-5, "cross_entropy");
    }
  }
}

#else  // neither a CUDA build nor the CPU mode

TEST_CASE("cuda: adversarial reductions (backend not built)") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
