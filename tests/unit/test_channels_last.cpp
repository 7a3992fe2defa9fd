// Channels-last (NHWC) memory format on the CPU: the stride arithmetic, contiguous(x, fmt), which
// ops keep the format (elementwise, batch_norm, pools through a copy, clone / to_dtype), and the
// op-layer semantics: a channels-last input gives the same values and gradients as NCHW through
// conv2d, batch_norm, relu, pools, a residual add and linear, in f32 and under f16 autocast.
// `kiln train --channels-last` is parsed, logged and recorded in the run ledger.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "support/cli/run_kiln.h"

using namespace kiln;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// A small residual block: conv -> bn -> relu -> conv -> bn, + x, relu, max pool, avg pool,
// adaptive avg pool, linear. x: (N, C, H, W) with C channels in and out.
struct Block {
  Tensor w1, w2, b2, g1, be1, g2, be2, rm1, rv1, rm2, rv2, fc;
  explicit Block(int64_t C) {
    manual_seed(11);
    w1 = mul(randn({C, C, 3, 3}), 0.2);
    w2 = mul(randn({C, C, 3, 3}), 0.2);
    b2 = mul(randn({C}), 0.1);
    g1 = add(mul(randn({C}), 0.1), 1.0);
    be1 = mul(randn({C}), 0.1);
    g2 = add(mul(randn({C}), 0.1), 1.0);
    be2 = mul(randn({C}), 0.1);
    fc = mul(randn({5, C}), 0.3);
    for (Tensor* t : {&w1, &w2, &b2, &g1, &be1, &g2, &be2, &fc}) t->set_requires_grad(true);
    rm1 = zeros({C});
    rv1 = ones({C});
    rm2 = zeros({C});
    rv2 = ones({C});
  }
  std::vector<Tensor> params() const { return {w1, w2, b2, g1, be1, g2, be2, fc}; }
  // Returns the pooled (N, C, H/2, W/2) map and the logits.
  std::pair<Tensor, Tensor> operator()(const Tensor& x) {
    Tensor y = relu(batch_norm(conv2d(x, w1, Tensor(), {1, 1}, {1, 1}), g1, be1, rm1, rv1, true, 0.1, 1e-5));
    y = batch_norm(conv2d(y, w2, b2, {1, 1}, {1, 1}), g2, be2, rm2, rv2, true, 0.1, 1e-5);
    y = relu(add(y, to_dtype(x, y.dtype())));  // under autocast y is f16, x f32
    Tensor p = avg_pool2d(max_pool2d(y, {2, 2}), {3, 3}, {1, 1}, {1, 1});
    Tensor logits = linear(flatten(adaptive_avg_pool2d(p, {1, 1}), 1), fc);
    return {p, logits};
  }
};

struct RunResult {
  Tensor pooled, logits, dx;
  std::vector<Tensor> grads;
};

RunResult run_block(const Tensor& x0, bool channels_last, bool amp) {
  Block blk(x0.size(1));
  Tensor x = channels_last ? contiguous(x0, MemoryFormat::channels_last) : clone(x0);
  x = x.detach();
  x.set_requires_grad(true);
  RunResult r;
  {
    AutocastGuard ac(amp);
    auto out = blk(x);
    r.pooled = out.first;
    r.logits = out.second;
  }
  sum(mul(to_dtype(r.logits, DType::f32), to_dtype(r.logits, DType::f32))).backward();
  r.dx = x.grad();
  for (const Tensor& p : blk.params()) r.grads.push_back(p.grad());
  return r;
}

}  // namespace

TEST_CASE("channels_last: strides, is_channels_last, suggest_memory_format, contiguous(x, fmt)") {
  CHECK(strides_for({2, 3, 4, 5}, MemoryFormat::channels_last) == Shape{60, 1, 15, 3});
  CHECK(strides_for({2, 3, 4, 5}, MemoryFormat::contiguous) == Shape{60, 20, 5, 1});
  CHECK_THROWS_WITH_AS(strides_for({2, 3, 4}, MemoryFormat::channels_last), doctest::Contains("4-D"), Error);
  manual_seed(1);
  Tensor x = randn({2, 3, 4, 5});
  CHECK_FALSE(is_channels_last(x));
  CHECK(suggest_memory_format(x) == MemoryFormat::contiguous);
  Tensor c = contiguous(x, MemoryFormat::channels_last);
  CHECK(is_channels_last(c));
  CHECK_FALSE(c.is_contiguous());
  CHECK(c.strides() == Shape{60, 1, 15, 3});
  CHECK(suggest_memory_format(c) == MemoryFormat::channels_last);
  CHECK(max_abs_diff(x, c) == 0);
  CHECK(contiguous(c, MemoryFormat::channels_last).is_same(c));  // already in that format: no copy
  Tensor back = contiguous(c);
  CHECK(back.is_contiguous());
  CHECK(max_abs_diff(x, back) == 0);
  // NHWC memory order: element (n, c, h, w) sits at ((n*H + h)*W + w)*C + c.
  const float* p = static_cast<const float*>(c.data_ptr());
  const std::vector<float> v = x.to_vector<float>();
  CHECK(p[((1 * 4 + 2) * 5 + 3) * 3 + 1] == v[((1 * 3 + 1) * 4 + 2) * 5 + 3]);
  // A permuted NHWC tensor is channels-last too (a view, not a copy).
  Tensor nhwc = randn({2, 4, 5, 3});
  CHECK(is_channels_last(permute(nhwc, {0, 3, 1, 2})));
  // Ambiguous shapes (C == 1, or H == W == 1) are both; ops keep them contiguous.
  Tensor one_c = randn({2, 1, 4, 5});
  CHECK(is_channels_last(one_c));
  CHECK(suggest_memory_format(one_c) == MemoryFormat::contiguous);
  CHECK_FALSE(is_channels_last(randn({2, 3, 4})));
  CHECK_THROWS_WITH_AS(contiguous(randn({2, 3}), MemoryFormat::channels_last), doctest::Contains("4-D"), Error);
  // contiguous(x, channels_last) is differentiable.
  Tensor a = randn({1, 2, 3, 3});
  a.set_requires_grad(true);
  sum(mul(contiguous(a, MemoryFormat::channels_last), 3.0)).backward();
  CHECK(max_abs_diff(a.grad(), full({1, 2, 3, 3}, 3.0)) == 0);
}

TEST_CASE("channels_last: elementwise ops, clone, to_dtype, batch_norm and pools keep the format") {
  manual_seed(2);
  Tensor x = contiguous(randn({2, 3, 6, 6}), MemoryFormat::channels_last);
  CHECK(is_channels_last(relu(x)));
  CHECK(is_channels_last(add(x, x)));
  CHECK(is_channels_last(mul(x, 2.0)));
  CHECK(is_channels_last(add(x, ones({1, 3, 1, 1}))));  // broadcast operand: x decides
  CHECK(is_channels_last(clone(x)));
  CHECK(is_channels_last(to_dtype(x, DType::f16)));
  CHECK(contiguous(x).is_contiguous());
  Tensor g = ones({3}), b = zeros({3});
  CHECK(is_channels_last(batch_norm(x, g, b, Tensor(), Tensor(), true, 0.1, 1e-5)));
  CHECK(is_channels_last(max_pool2d(x, {2, 2})));
  CHECK(is_channels_last(avg_pool2d(x, {2, 2})));
  // reshape / flatten of a channels-last tensor copy to row-major order (NCHW element order).
  Tensor f = flatten(x, 1);
  CHECK(f.is_contiguous());
  CHECK(max_abs_diff(f, flatten(contiguous(x), 1)) == 0);
  CHECK(max_abs_diff(reshape(x, {6, 36}), reshape(contiguous(x), {6, 36})) == 0);
  // A transposed (non-NHWC) view still gives contiguous outputs.
  Tensor t = transpose(randn({2, 3, 6, 6}), 2, 3);
  CHECK(relu(t).is_contiguous());
  CHECK(clone(t).is_contiguous());
}

TEST_CASE("channels_last: conv/bn/relu/add/pool/linear give NCHW's values and gradients (f32)") {
  manual_seed(3);
  Tensor x = randn({2, 4, 8, 8});
  RunResult a = run_block(x, false, false), b = run_block(x, true, false);
  CHECK(is_channels_last(b.pooled));
  CHECK_FALSE(is_channels_last(a.pooled));
  // Batch norm sums in another order in NHWC: agreement to f32 rounding, not bit for bit.
  const double tol = 1e-5;
  CHECK(max_abs_diff(a.pooled, b.pooled) <= tol * std::max(1.0, max_abs(a.pooled)));
  CHECK(max_abs_diff(a.logits, b.logits) <= tol * std::max(1.0, max_abs(a.logits)));
  REQUIRE(a.dx.defined());
  REQUIRE(b.dx.defined());
  CHECK(max_abs_diff(a.dx, b.dx) <= tol * std::max(1.0, max_abs(a.dx)));
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(b.grads[i].defined());
    CHECK(b.grads[i].is_contiguous());  // parameter gradients stay row-major
    CHECK(max_abs_diff(a.grads[i], b.grads[i]) <= tol * std::max(1.0, max_abs(a.grads[i])));
  }
}

TEST_CASE("channels_last: the same under f16 autocast (CPU f16 rule: compute f32, round on store)") {
  manual_seed(4);
  Tensor x = randn({2, 4, 8, 8});
  RunResult a = run_block(x, false, true), b = run_block(x, true, true);
  CHECK(a.logits.dtype() == DType::f16);
  // f16 stores: both paths round the same f32 values, except where batch norm's summation order
  // moves a value across an f16 rounding boundary (one f16 ulp, ~1e-3 relative, then propagated).
  const double tol = 1e-2;
  CHECK(max_abs_diff(a.pooled, b.pooled) <= tol * std::max(1.0, max_abs(a.pooled)));
  CHECK(max_abs_diff(a.logits, b.logits) <= tol * std::max(1.0, max_abs(a.logits)));
  CHECK(max_abs_diff(a.dx, b.dx) <= tol * std::max(1.0, max_abs(a.dx)));
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs_diff(a.grads[i], b.grads[i]) <= tol * std::max(1.0, max_abs(a.grads[i])));
  }
}

TEST_CASE("cli train --channels-last: parsed, logged, recorded in runs.jsonl, same loss as NCHW") {
  const std::string data = kiln_test::cli_temp_dir("cl_data");
  kiln_test::make_npy_folder(data, 16, 3, 8, 2);  // 3 channels: a real NHWC input
  auto args = [&](const std::string& out) {
    return "train --model small_cnn --data " + data + " --epochs 1 --batch 8 --optimizer sgd --lr 0.05 --seed 3 "
           "--threads 1 --device cpu --out " + out;
  };
  const std::string a = kiln_test::cli_temp_dir("cl_run_a"), b = kiln_test::cli_temp_dir("cl_run_b");
  auto ra = kiln_test::run_kiln(args(a));
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  auto rb = kiln_test::run_kiln(args(b) + " --channels-last");
  REQUIRE_MESSAGE(rb.status == 0, rb.output);
  CHECK(kiln_test::contains(rb.output, "channels-last: training batches are NHWC"));
  CHECK_FALSE(kiln_test::contains(ra.output, "channels-last"));
  auto last = [](const std::string& path) {
    std::ifstream f(path);
    std::string line, l;
    while (std::getline(f, line))
      if (!line.empty()) l = line;
    return nlohmann::json::parse(l);
  };
  const nlohmann::json ja = last(a + "/runs.jsonl"), jb = last(b + "/runs.jsonl");
  CHECK(ja["config"]["channels_last"] == false);
  CHECK(jb["config"]["channels_last"] == true);
  const double la = ja["epochs"][0]["train_loss"].get<double>(), lb = jb["epochs"][0]["train_loss"].get<double>();
  CHECK(std::fabs(la - lb) <= 1e-4 * std::max(1.0, std::fabs(la)));
  // A flag takes no value.
  auto bad = kiln_test::run_kiln(args(b) + " --channels-last=maybe");
  CHECK(bad.status != 0);
}
