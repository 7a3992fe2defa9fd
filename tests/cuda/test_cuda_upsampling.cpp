// CUDA conv_transpose2d and interpolate against the CPU backend through the Tensor API: forward and
// every input gradient, f32 (max|a - b| / max|a| <= 1e-5) and f64 (1e-12), on the parity suite's
// shapes: odd sizes, stride 2 with output_padding 1, groups 2, dilation 2, nearest and bilinear with
// scale factors 2 and 1.5 and align_corners both ways, NaN propagation, f16 through f32 compute.
// Without a GPU each test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/ops/upsampling.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

// max |a - b| / max |a| (a: CPU reference); NaN must be NaN on both sides.
double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(x[i]));
  }
  return num / den;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on cpu copies and gpu copies of `inputs` (all requiring grad): output and every gradient.
void check_fn(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs, double tol) {
  std::vector<Tensor> c, g;
  for (const Tensor& t : inputs) {
    c.push_back(clone(t.detach()).set_requires_grad(true));
    g.push_back(to_device(t.detach(), kGpu).set_requires_grad(true));
  }
  Tensor yc = f(c), yg = f(g);
  CHECK(yg.device().is_cuda());
  REQUIRE(back(yg).sizes() == yc.sizes());
  const double e = rel_err(yc.detach(), back(yg));
  INFO(name << " forward: relative error " << e);
  CHECK(e <= tol);
  Tensor seed = uniform(yc.sizes(), -1, 1, yc.dtype());
  sum(mul(yc, seed)).backward();
  sum(mul(yg, to_device(seed, kGpu))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE(g[i].grad().defined());
    const double eg = rel_err(c[i].grad(), back(g[i].grad()));
    INFO(name << " backward of input " << i << ": relative error " << eg);
    CHECK(eg <= tol);
  }
}

}  // namespace

TEST_CASE("cuda: conv_transpose2d forward and backward against the CPU") {
  if (skip_without_gpu()) return;
  struct Case { Shape x, w; std::vector<int64_t> s, p, op, d; int64_t g; };
  for (const Case& cs : {Case{{2, 4, 7, 6}, {4, 5, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                         Case{{2, 6, 5, 7}, {6, 4, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
                         Case{{3, 8, 4, 5}, {8, 4, 2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1},
                         Case{{2, 4, 5, 4}, {4, 3, 3, 3}, {2, 3}, {1, 0}, {1, 2}, {1, 1}, 2},
                         Case{{2, 4, 7, 9}, {4, 2, 3, 2}, {2, 2}, {1, 2}, {1, 0}, {2, 1}, 2},
                         Case{{4, 64, 16, 16}, {64, 32, 2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1}}) {
    Fn f = [cs](const std::vector<Tensor>& in) { return conv_transpose2d(in[0], in[1], in[2], cs.s, cs.p, cs.op, cs.g, cs.d); };
    const int64_t K = cs.w[1] * cs.g;
    check_fn("conv_transpose2d f32", f, {uniform(cs.x, -1, 1), uniform(cs.w, -1, 1), uniform({K}, -1, 1)}, 1e-5);
    check_fn("conv_transpose2d f64", f,
             {uniform(cs.x, -1, 1, DType::f64), uniform(cs.w, -1, 1, DType::f64), uniform({K}, -1, 1, DType::f64)}, 1e-12);
  }
  // f16 computes in f32 on the device and rounds, as on the CPU.
  Tensor x = to_dtype(uniform({2, 4, 5, 5}, -1, 1), DType::f16), w = to_dtype(uniform({4, 3, 3, 3}, -1, 1), DType::f16);
  Tensor yc = conv_transpose2d(x, w, Tensor(), {2}, {1}, {1});
  Tensor yg = conv_transpose2d(to_device(x, kGpu), to_device(w, kGpu), Tensor(), {2}, {1}, {1});
  CHECK(yg.dtype() == DType::f16);
  CHECK(rel_err(to_dtype(yc, DType::f32), to_dtype(back(yg), DType::f32)) <= 1e-3);
}

TEST_CASE("cuda: interpolate nearest and bilinear forward and backward against the CPU") {
  if (skip_without_gpu()) return;
  struct Case { Shape x; std::vector<int64_t> size; std::vector<double> scale; InterpMode mode; bool ac; };
  const InterpMode nearest = InterpMode::nearest, bilinear = InterpMode::bilinear;
  for (const Case& cs : {Case{{2, 3, 5, 7}, {}, {2.0}, nearest, false}, Case{{2, 3, 5, 7}, {}, {1.5}, nearest, false},
                         Case{{1, 4, 8, 8}, {11, 13}, {}, nearest, false}, Case{{1, 4, 9, 9}, {4, 5}, {}, nearest, false},
                         Case{{2, 3, 5, 7}, {}, {2.0}, bilinear, false}, Case{{2, 3, 5, 7}, {}, {2.0}, bilinear, true},
                         Case{{2, 3, 5, 7}, {}, {1.5}, bilinear, false}, Case{{2, 3, 5, 7}, {}, {1.5}, bilinear, true},
                         Case{{1, 4, 9, 3}, {4, 7}, {}, bilinear, true}, Case{{1, 4, 9, 3}, {9, 3}, {}, bilinear, false},
                         Case{{8, 64, 32, 32}, {}, {2.0}, bilinear, false}}) {
    Fn f = [cs](const std::vector<Tensor>& in) { return interpolate(in[0], cs.size, cs.scale, cs.mode, cs.ac); };
    check_fn("interpolate f32", f, {uniform(cs.x, -1, 1)}, 1e-5);
    check_fn("interpolate f64", f, {uniform(cs.x, -1, 1, DType::f64)}, 1e-12);
  }
  // NaN in the input reaches the same outputs on both devices (bilinear reads zero-weight neighbours).
  Tensor x = uniform({1, 1, 4, 4}, -1, 1);
  static_cast<float*>(x.data_ptr())[5] = NAN;
  for (InterpMode m : {nearest, bilinear}) {
    Tensor yc = interpolate(x, {}, {1.5}, m), yg = interpolate(to_device(x, kGpu), {}, {1.5}, m);
    CHECK(rel_err(yc, back(yg)) <= 1e-6);
  }
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: conv_transpose2d and interpolate not built") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
