// conv_transpose2d and interpolate against PyTorch 1.13 (F.conv_transpose2d, F.interpolate) on the
// same f32 weights and inputs, forward and backward, through tests/support/oracle/oracle.py (one
// python start per test case). Random cases: L2 relative error <= 1e-5 for every output and
// gradient, odd sizes, stride 2 with output_padding 1, groups 2, dilation 2, scale factors 2 and
// 1.5, align_corners both ways; nearest forward outputs must match bit for bit (a copy: any index
// off by one shows). NaN / inf inputs: element by element (support/oracle/parity_exact.h).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "engine/ops/upsampling.h"
#include "support/oracle/oracle_client.h"
#include "support/oracle/parity_exact.h"
#include "support/tensor_host.h"

using namespace kiln;
using kiln::test::exact_case;
using kiln::test::ExactCase;
using kiln::test::from_host;
using kiln::test::leaf;
using kiln::test::rel_error;
using kiln::test::to_host;
using V = std::vector<Tensor>;

namespace {

struct Case {
  std::string label;
  oracle::Case torch_case;
  V inputs;  // kiln leaves = torch inputs 0..n-1
  std::function<Tensor(const V&)> run;
  bool exact_forward = false;  // nearest: a copy, compared bit for bit
};

Tensor rnd(const Shape& s) {
  NoGradGuard ng;
  return uniform(s, -1, 1, DType::f32).set_requires_grad(true);
}

Case make(const std::string& label, const std::string& op, V in, nlohmann::json kw, std::function<Tensor(const V&)> run,
          bool exact_forward = false) {
  Case c;
  c.label = label;
  c.torch_case.op = op;
  for (auto& t : in) c.torch_case.inputs.push_back(to_host(t));
  c.torch_case.kwargs = kw;
  c.inputs = in;
  c.run = run;
  c.exact_forward = exact_forward;
  return c;
}

// Runs every case in kiln and in torch; checks output and input gradients. Returns tensors compared.
int run_cases(std::vector<Case>& cs, const std::string& tag) {
  std::vector<Tensor> outs;
  std::vector<oracle::Case> tcs;
  for (auto& c : cs) {
    Tensor y = c.run(c.inputs);
    Tensor g;
    {
      NoGradGuard ng;
      g = uniform(y.sizes(), 0.5, 1.5, DType::f32);
    }
    c.torch_case.grad_out.push_back(to_host(g));
    y.backward(g);
    outs.push_back(y);
    tcs.push_back(c.torch_case);
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_parity_" + tag + "_" + std::to_string(::getpid()))).string();
  std::vector<oracle::Result> res = oracle::run(tcs, dir);
  std::filesystem::remove_all(dir);
  REQUIRE(res.size() == cs.size());
  int compared = 0;
  double worst = 0;
  for (size_t k = 0; k < cs.size(); ++k) {
    Case& c = cs[k];
    CAPTURE(c.label);
    REQUIRE_MESSAGE(res[k].error.empty(), c.label, ": torch error: ", res[k].error);
    REQUIRE(!res[k].outputs.empty());
    Tensor ref = from_host(res[k].outputs[0]);
    REQUIRE_MESSAGE(outs[k].sizes() == ref.sizes(), c.label, ": kiln ", outs[k].str(), " torch ", ref.str());
    const double e = rel_error(outs[k], ref);
    worst = std::max(worst, e);
    CHECK_MESSAGE(e <= 1e-5, c.label, " output rel error ", e);
    if (c.exact_forward) CHECK_MESSAGE(outs[k].to_vector<float>() == ref.to_vector<float>(), c.label, " not bit-exact");
    ++compared;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      auto it = res[k].grads.find((int)i);
      REQUIRE_MESSAGE(it != res[k].grads.end(), c.label, ": torch returned no grad for input ", i);
      REQUIRE_MESSAGE(c.inputs[i].grad().defined(), c.label, ": kiln computed no grad for input ", i);
      const double eg = rel_error(c.inputs[i].grad(), from_host(it->second));
      worst = std::max(worst, eg);
      CHECK_MESSAGE(eg <= 1e-5, c.label, " grad of input ", i, " rel error ", eg);
      ++compared;
    }
  }
  MESSAGE(tag, ": ", cs.size(), " cases, ", compared, " tensors compared with PyTorch, worst L2 relative error ", worst);
  return compared;
}

}  // namespace

TEST_CASE("parity with PyTorch: conv_transpose2d forward and backward (f32, 1e-5)") {
  manual_seed(2026);
  std::vector<Case> cs;
  auto convt = [&](const std::string& label, Shape x, Shape w, bool bias, std::vector<int64_t> s, std::vector<int64_t> p,
                   std::vector<int64_t> op, int64_t g, std::vector<int64_t> d) {
    V in = {rnd(x), rnd(w)};
    if (bias) in.push_back(rnd({w[1] * g}));
    nlohmann::json kw = {{"stride", s}, {"padding", p}, {"output_padding", op}, {"groups", g}, {"dilation", d}};
    cs.push_back(make(label, "conv_transpose2d", in, kw, [=](const V& v) {
      return conv_transpose2d(v[0], v[1], bias ? v[2] : Tensor(), s, p, op, g, d);
    }));
  };
  convt("3x3 s1 p1", {2, 4, 7, 6}, {4, 5, 3, 3}, true, {1, 1}, {1, 1}, {0, 0}, 1, {1, 1});
  convt("3x3 s2 p1 op1 (UNet up)", {2, 6, 5, 7}, {6, 4, 3, 3}, true, {2, 2}, {1, 1}, {1, 1}, 1, {1, 1});
  convt("2x2 s2 (UNet up)", {3, 8, 4, 5}, {8, 4, 2, 2}, true, {2, 2}, {0, 0}, {0, 0}, 1, {1, 1});
  convt("groups 2, stride (2, 3), op (1, 2)", {2, 4, 5, 4}, {4, 3, 3, 3}, true, {2, 3}, {1, 0}, {1, 2}, 2, {1, 1});
  convt("dilation 2, op 1 < dilation", {1, 3, 6, 5}, {3, 2, 3, 3}, false, {1, 1}, {2, 1}, {1, 1}, 1, {2, 2});
  convt("dilation 2, stride 2, groups 2, odd", {2, 4, 7, 9}, {4, 2, 3, 2}, true, {2, 2}, {1, 2}, {1, 0}, 2, {2, 1});
  convt("5x5 s3 p2 op2", {1, 2, 4, 3}, {2, 3, 5, 5}, true, {3, 3}, {2, 2}, {2, 2}, 1, {1, 1});
  run_cases(cs, "conv_transpose2d");
}

TEST_CASE("parity with PyTorch: interpolate nearest and bilinear forward and backward (f32, 1e-5)") {
  manual_seed(2027);
  std::vector<Case> cs;
  auto interp = [&](const std::string& label, Shape x, std::vector<int64_t> size, std::vector<double> scale,
                    InterpMode mode, bool ac) {
    nlohmann::json kw = {{"mode", interp_mode_name(mode)}};
    // One value goes to torch as a number (a 1-element list means one spatial dimension there).
    if (!size.empty()) kw["size"] = size.size() == 1 ? nlohmann::json(size[0]) : nlohmann::json(size);
    if (!scale.empty()) kw["scale_factor"] = scale.size() == 1 ? nlohmann::json(scale[0]) : nlohmann::json(scale);
    if (mode == InterpMode::bilinear) kw["align_corners"] = ac;
    cs.push_back(make(label, "interpolate", {rnd(x)}, kw,
                      [=](const V& v) { return interpolate(v[0], size, scale, mode, ac); },
                      mode == InterpMode::nearest));
  };
  const InterpMode nearest = InterpMode::nearest, bilinear = InterpMode::bilinear;
  for (Shape x : {Shape{2, 3, 5, 7}, Shape{1, 4, 8, 8}, Shape{2, 2, 9, 3}}) {
    const std::string s = shape_str(x);
    interp("nearest scale 2 " + s, x, {}, {2.0}, nearest, false);
    interp("nearest scale 1.5 " + s, x, {}, {1.5}, nearest, false);
    interp("nearest scale (1.5, 2.5) " + s, x, {}, {1.5, 2.5}, nearest, false);
    interp("nearest scale 0.6 " + s, x, {}, {0.6}, nearest, false);
    interp("nearest size (11, 13) " + s, x, {11, 13}, {}, nearest, false);
    interp("nearest size (4, 2) " + s, x, {4, 2}, {}, nearest, false);
    for (bool ac : {false, true}) {
      const std::string a = ac ? " align_corners " : " ";
      interp("bilinear scale 2" + a + s, x, {}, {2.0}, bilinear, ac);
      interp("bilinear scale 1.5" + a + s, x, {}, {1.5}, bilinear, ac);
      interp("bilinear scale (1.7, 0.5)" + a + s, x, {}, {1.7, 0.5}, bilinear, ac);
      interp("bilinear size (11, 13)" + a + s, x, {11, 13}, {}, bilinear, ac);
      interp("bilinear size (3, 1)" + a + s, x, {3, 1}, {}, bilinear, ac);
      interp("bilinear same size" + a + s, x, {x[2], x[3]}, {}, bilinear, ac);
    }
  }
  // Sizes where the float index rule matters: 1/3 and 3/7 scale steps, large outputs.
  interp("nearest size 3 -> 7", {1, 1, 3, 3}, {7, 7}, {}, nearest, false);
  interp("nearest scale 3 on 7", {1, 1, 7, 7}, {}, {3.0}, nearest, false);
  interp("nearest scale 1.1 on 10", {1, 2, 10, 10}, {}, {1.1}, nearest, false);
  interp("nearest size 25 -> 64", {1, 1, 25, 25}, {64, 64}, {}, nearest, false);
  interp("bilinear scale 1.1 on 10", {1, 2, 10, 10}, {}, {1.1}, bilinear, false);
  run_cases(cs, "interpolate");
}

TEST_CASE("parity with PyTorch: NaN and inf through conv_transpose2d and interpolate") {
  const float nan = NAN, inf = INFINITY;
  std::vector<ExactCase> cs;
  std::vector<float> xv(1 * 2 * 4 * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.125f * (float)(i % 7) - 0.3f;
  xv[5] = nan;
  xv[26] = inf;
  xv[31] = -inf;
  for (InterpMode mode : {InterpMode::nearest, InterpMode::bilinear})
    for (bool ac : {false, true}) {
      if (ac && mode == InterpMode::nearest) continue;
      for (std::vector<double> scale : {std::vector<double>{2.0}, std::vector<double>{1.5}, std::vector<double>{1.0}}) {
        nlohmann::json kw = {{"mode", interp_mode_name(mode)}, {"scale_factor", scale[0]}};
        if (mode == InterpMode::bilinear) kw["align_corners"] = ac;
        const std::string label = std::string(interp_mode_name(mode)) + (ac ? " align_corners" : "") + " scale " +
                                  std::to_string(scale[0]) + " with NaN and inf";
        cs.push_back(exact_case(label, "interpolate", {leaf(xv, {1, 2, 4, 4})}, kw, [=](const V& v) {
          return V{interpolate(v[0], {}, scale, mode, ac)};
        }));
      }
    }
  std::vector<float> wv(2 * 3 * 3 * 3);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.25f * (float)(i % 5) - 0.5f;
  cs.push_back(exact_case("conv_transpose2d with NaN and inf, stride 2 output_padding 1", "conv_transpose2d",
                          {leaf(xv, {1, 2, 4, 4}), leaf(wv, {2, 3, 3, 3})},
                          {{"stride", 2}, {"padding", 1}, {"output_padding", 1}}, [](const V& v) {
                            return V{conv_transpose2d(v[0], v[1], Tensor(), {2}, {1}, {1})};
                          }));
  const int n = kiln::test::run_exact_cases(cs, "upsampling_nonfinite");
  MESSAGE("non-finite upsampling parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}
