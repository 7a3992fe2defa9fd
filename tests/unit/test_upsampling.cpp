// conv_transpose2d and interpolate without the oracle: shapes on the meta device (forward and
// backward, CPU shapes, no host memory), torch's output-size formulas and index rules at known
// values, one clear error per bad argument (naming the op and the shapes), the per-element sums of
// kernels/common/upsample_math.h (what the CUDA kernels run) against the CPU GEMM kernels, the nn
// modules' parameter layout and init bounds, the autocast rules, and the memory predictor: a small model using both
// ops has predicted == measured peak allocated bytes on the CPU, to the byte.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "data/array_dataset.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/upsampling.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/ops/upsampling.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "engine/train/memory_predict.h"
#include "engine/train/train_step.h"
#include "kernels/common/upsample_math.h"
#include "kernels/cpu/conv_transpose2d.h"

using namespace kiln;

namespace {

// The message of the kiln::Error f throws ("" and a failed check when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL_CHECK("no kiln::Error thrown");
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("conv_transpose2d and interpolate on meta: CPU shapes forward and backward, no host memory") {
  using V = std::vector<Tensor>;
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    std::function<Tensor(const V&)> f;
    Shape expect;
  };
  std::vector<Case> cases = {
      {"convT s2 op1", {{2, 4, 5, 7}, {4, 3, 3, 3}, {3}},
       [](const V& x) { return conv_transpose2d(x[0], x[1], x[2], {2}, {1}, {1}); }, {2, 3, 10, 14}},
      {"convT groups 2 dil 2", {{1, 4, 6, 5}, {4, 2, 3, 2}},
       [](const V& x) { return conv_transpose2d(x[0], x[1], Tensor(), {1, 2}, {0, 1}, {0, 1}, 2, {2, 2}); },
       {1, 4, 10, 10}},
      {"convT op < dilation", {{1, 2, 4, 4}, {2, 2, 2, 2}},
       [](const V& x) { return conv_transpose2d(x[0], x[1], Tensor(), {1}, {0}, {1}, 1, {2}); }, {1, 2, 7, 7}},
      {"nearest size", {{2, 3, 5, 7}}, [](const V& x) { return interpolate(x[0], {8, 3}); }, {2, 3, 8, 3}},
      {"nearest scale 1.5", {{2, 3, 5, 7}}, [](const V& x) { return interpolate(x[0], {}, {1.5}); }, {2, 3, 7, 10}},
      {"bilinear scale 2,1.5 corners", {{1, 2, 5, 3}},
       [](const V& x) { return interpolate(x[0], {}, {2.0, 1.5}, InterpMode::bilinear, true); }, {1, 2, 10, 4}},
      {"bilinear down", {{1, 2, 9, 9}}, [](const V& x) { return interpolate(x[0], {4}, {}, InterpMode::bilinear); },
       {1, 2, 4, 4}},
  };
  CachingAllocator* host = caching_allocator_for(Device::cpu());
  for (auto& c : cases) {
    std::string case_name = c.name;
    CAPTURE(case_name);
    V cpu_in, meta_in;
    for (auto& s : c.shapes) {
      cpu_in.push_back(uniform(s, 0.5, 1.5).set_requires_grad(true));
      meta_in.push_back(empty(s, DType::f32, Device::meta()).set_requires_grad(true));
    }
    Tensor cpu_out = c.f(cpu_in);
    CHECK(cpu_out.sizes() == c.expect);
    const int64_t host_before = host ? host->stats().total.allocated.current : 0;
    Tensor meta_out = c.f(meta_in);
    CHECK(meta_out.device().is_meta());
    CHECK(meta_out.sizes() == c.expect);
    CHECK(meta_out.dtype() == DType::f32);
    meta_out.backward(empty(meta_out.sizes(), DType::f32, Device::meta()));
    for (size_t i = 0; i < meta_in.size(); ++i) {
      REQUIRE(meta_in[i].grad().defined());
      CHECK(meta_in[i].grad().sizes() == meta_in[i].sizes());
      CHECK(meta_in[i].grad().device().is_meta());
    }
    if (host) CHECK(host->stats().total.allocated.current == host_before);
  }
}

TEST_CASE("torch's index rules: nearest floor in float, bilinear source index and weights") {
  // F.interpolate(arange(5), scale_factor=1.5, mode='nearest') in torch 1.13: [0, 0, 1, 2, 2, 3, 4].
  const std::vector<int64_t> want = {0, 0, 1, 2, 2, 3, 4};
  for (int64_t o = 0; o < 7; ++o) CHECK(nearest_source_index(o, 5, 7, 1.5) == want[(size_t)o]);
  // The same size from `size` uses in/out = 5/7: floor(o * 0.714..) = [0, 0, 1, 2, 2, 3, 4] too,
  // but 3 -> 7 by size (scale 3/7) and by scale factor 7/3 differ nowhere; 4 -> 6 vs scale 1.5:
  for (int64_t o = 0; o < 6; ++o) CHECK(nearest_source_index(o, 4, 6, 0) == (o * 2) / 3);
  // out == 2 in and out == in are exact shortcuts.
  for (int64_t o = 0; o < 10; ++o) CHECK(nearest_source_index(o, 5, 10, 0) == o / 2);
  for (int64_t o = 0; o < 5; ++o) CHECK(nearest_source_index(o, 5, 5, 0) == o);
  // Downsampling clamps to in - 1.
  CHECK(nearest_source_index(2, 9, 3, 0) == 6);

  // Bilinear, align_corners false, scale 1.5 on 5: torch gives 0, 0.5, 1.1667, 1.8333, 2.5, 3.1667, 3.8333
  // for x = arange(5): the value is i0 + l1 (i1 = i0 + 1 inside).
  const std::vector<double> lin = {0, 0.5, 1.0 + 1.0 / 6, 1.0 + 5.0 / 6, 2.5, 3.0 + 1.0 / 6, 3.0 + 5.0 / 6};
  for (int64_t o = 0; o < 7; ++o) {
    LinearTaps<double> t = linear_source<double>(o, 5, 7, false, 1.5);
    CHECK(t.l0 * (double)t.i0 + t.l1 * (double)t.i1 == doctest::Approx(lin[(size_t)o]).epsilon(1e-12));
    CHECK(t.l0 + t.l1 == doctest::Approx(1.0));
  }
  // The first output clamps to source 0 (weight 0 on pixel 1, still read); the last stays on in - 1.
  LinearTaps<float> first = linear_source<float>(0, 4, 8, false, 0);
  CHECK(first.i0 == 0);
  CHECK(first.i1 == 1);
  CHECK(first.l1 == 0.f);
  LinearTaps<float> last = linear_source<float>(7, 4, 8, false, 0);
  CHECK(last.i0 == 3);
  CHECK(last.i1 == 3);
  // align_corners: the ends map to the ends; out == 1 reads pixel 0.
  LinearTaps<double> end = linear_source<double>(4, 3, 5, true, 0);
  CHECK(end.i0 == 2);
  CHECK(end.l1 == 0.0);
  LinearTaps<double> mid = linear_source<double>(1, 3, 5, true, 0);
  CHECK(mid.i0 == 0);
  CHECK(mid.l1 == doctest::Approx(0.5));
  CHECK(linear_source<double>(0, 6, 1, true, 0).i0 == 0);
  // torch's source index is a double: 4 -> 8 with align_corners ends at 3/7 (float) * 7 = 3.00000003,
  // so pixel 3 keeps a tiny weight l1 > 0 (an exact 0 would turn a -inf there into NaN).
  LinearTaps<float> edge = linear_source<float>(7, 4, 8, true, 0);
  CHECK(edge.i0 == 3);
  CHECK(edge.l1 > 0.f);
  CHECK(edge.l1 < 1e-7f);
  // Same size: weights (1, 0) on the same pixel (torch's copy case).
  LinearTaps<float> same = linear_source<float>(3, 6, 6, false, 0);
  CHECK(same.i0 == 3);
  CHECK(same.i1 == 3);
  CHECK(same.l0 == 1.f);
}

TEST_CASE("conv_transpose2d and interpolate: one clear error per bad argument, naming the op and the shapes") {
  Tensor x = uniform({2, 4, 5, 5}, -1, 1), w = uniform({4, 3, 3, 3}, -1, 1);
  std::string e = error_of([&] { conv_transpose2d(x, w, Tensor(), {1}, {-1}); });
  CHECK(has(e, "conv_transpose2d"));
  CHECK(has(e, "padding must be >= 0"));
  CHECK(has(e, "x (2, 4, 5, 5)"));
  e = error_of([&] { conv_transpose2d(x, w, Tensor(), {2}, {0}, {2}); });  // op 2 >= stride 2 and dilation 1
  CHECK(has(e, "output_padding must be >= 0 and smaller than either stride or dilation"));
  CHECK(has(e, "output_padding (2, 2)"));
  CHECK(has(e, "stride (2, 2)"));
  // op 1 >= stride 1 but < dilation 2: valid, as torch.
  CHECK(conv_transpose2d(x, w, Tensor(), {1}, {0}, {1}, 1, {2}).sizes() == Shape{2, 3, 10, 10});
  e = error_of([&] { conv_transpose2d(x, uniform({3, 3, 3, 3}, -1, 1)); });
  CHECK(has(e, "conv_transpose2d: weight f32 (3, 3, 3, 3)"));
  CHECK(has(e, "input f32 (2, 4, 5, 5)"));
  e = error_of([&] { conv_transpose2d(x, w, Tensor(), {1}, {0}, {0}, 3); });
  CHECK(has(e, "groups 3 must divide"));
  e = error_of([&] { conv_transpose2d(x, w, uniform({4}, -1, 1)); });
  CHECK(has(e, "bias f32 (4,)"));
  CHECK(has(e, "3 output channels"));
  e = error_of([&] { conv_transpose2d(x, w, Tensor(), {1}, {4}); });  // (5-1) - 8 + 2 + 1 < 1
  CHECK(has(e, "empty output"));
  e = error_of([&] { conv_transpose2d(reshape(x, {2, 4, 25}), w); });
  CHECK(has(e, "must be 4-D"));

  e = error_of([&] { interpolate(x, {8}, {2.0}); });
  CHECK(has(e, "interpolate: exactly one of size and scale_factor must be given, got both"));
  CHECK(has(e, "f32 (2, 4, 5, 5)"));
  e = error_of([&] { interpolate(x, {}, {}); });
  CHECK(has(e, "got neither"));
  e = error_of([&] { interpolate(x, {8}, {}, InterpMode::nearest, true); });
  CHECK(has(e, "align_corners can only be set with mode bilinear"));
  e = error_of([&] { interpolate(x, {}, {0.1}); });  // floor(5 * 0.1) = 0
  CHECK(has(e, "output sizes must be greater than 0"));
  CHECK(has(e, "x (2, 4, 5, 5) -> (2, 4, 0, 0)"));
  e = error_of([&] { interpolate(x, {}, {-2.0}); });
  CHECK(has(e, "scale_factor must be positive"));
  e = error_of([&] { interpolate(x, {1, 2, 3}); });
  CHECK(has(e, "size needs 1 or 2 values"));
  e = error_of([&] { interp_mode_from_string("bicubic"); });
  CHECK(has(e, "unknown mode 'bicubic'"));
  CHECK(interp_mode_from_string("bilinear") == InterpMode::bilinear);
  e = error_of([&] { nn::Upsample(nn::UpsampleOptions{}); });
  CHECK(has(e, "Upsample: exactly one of size and scale_factor"));
  nn::ConvTranspose2dOptions bad;
  bad.in_channels = 4, bad.out_channels = 4, bad.kernel = 3, bad.stride = 2, bad.output_padding = 2;
  e = error_of([&] { nn::ConvTranspose2d m(bad); });
  CHECK(has(e, "output_padding 2 must be smaller than either stride 2 or dilation 1"));
}

TEST_CASE("conv_transpose2d: the per-element sums the CUDA kernels run equal the CPU GEMM kernels (f64)") {
  manual_seed(31);
  struct Case { int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, oph, opw, dh, dw, g; };
  for (const Case& c : {Case{2, 3, 5, 4, 4, 3, 3, 1, 1, 1, 0, 0, 0, 1, 1, 1}, Case{1, 4, 4, 5, 6, 3, 2, 2, 3, 1, 1, 1, 2, 1, 1, 2},
                        Case{2, 4, 3, 3, 2, 2, 3, 1, 2, 0, 1, 1, 0, 2, 1, 2}, Case{1, 2, 6, 2, 3, 1, 1, 2, 1, 0, 0, 1, 0, 1, 1, 1}}) {
    ConvTranspose2dDesc d;
    d.N = c.N, d.C = c.C, d.H = c.H, d.W = c.W, d.K = c.K, d.R = c.R, d.S = c.S;
    d.stride_h = c.sh, d.stride_w = c.sw, d.pad_h = c.ph, d.pad_w = c.pw, d.outpad_h = c.oph, d.outpad_w = c.opw;
    d.dil_h = c.dh, d.dil_w = c.dw, d.groups = c.g;
    const int64_t OH = d.out_h(), OW = d.out_w(), Kg = d.K / d.groups;
    CAPTURE(OH);
    CAPTURE(OW);
    Tensor x = uniform({d.N, d.C, d.H, d.W}, -1, 1, DType::f64), w = uniform({d.C, Kg, d.R, d.S}, -1, 1, DType::f64);
    Tensor b = uniform({d.K}, -1, 1, DType::f64), dy = uniform({d.N, d.K, OH, OW}, -1, 1, DType::f64);
    Tensor ws = empty({(int64_t)cpu::conv_transpose2d_workspace_bytes(d, sizeof(double))}, DType::u8);
    Tensor y = empty({d.N, d.K, OH, OW}, DType::f64), dx = empty(x.sizes(), DType::f64);
    Tensor dw = empty(w.sizes(), DType::f64), db = empty({d.K}, DType::f64);
    const double *xp = x.data<double>(), *wp = w.data<double>(), *bp = b.data<double>(), *gp = dy.data<double>();
    cpu::conv_transpose2d_forward<double>(d, xp, wp, bp, y.data<double>(), ws.data_ptr());
    cpu::conv_transpose2d_backward_input<double>(d, gp, wp, dx.data<double>(), ws.data_ptr());
    cpu::conv_transpose2d_backward_weight<double>(d, xp, gp, dw.data<double>(), db.data<double>(), ws.data_ptr());
    double worst = 0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t k = 0; k < d.K; ++k)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const double ref = convt_output_at<double>(d, xp, wp, n, k, oh, ow) + bp[k];
            worst = std::max(worst, std::fabs(ref - y.data<double>()[((n * d.K + k) * OH + oh) * OW + ow]));
          }
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t ch = 0; ch < d.C; ++ch)
        for (int64_t ih = 0; ih < d.H; ++ih)
          for (int64_t iw = 0; iw < d.W; ++iw) {
            const double ref = convt_input_grad_at<double>(d, gp, wp, n, ch, ih, iw);
            worst = std::max(worst, std::fabs(ref - dx.data<double>()[((n * d.C + ch) * d.H + ih) * d.W + iw]));
          }
    for (int64_t ch = 0; ch < d.C; ++ch)
      for (int64_t kk = 0; kk < Kg; ++kk)
        for (int64_t r = 0; r < d.R; ++r)
          for (int64_t s = 0; s < d.S; ++s) {
            const double ref = convt_weight_grad_at<double>(d, xp, gp, ch, kk, r, s);
            worst = std::max(worst, std::fabs(ref - dw.data<double>()[((ch * Kg + kk) * d.R + r) * d.S + s]));
          }
    for (int64_t k = 0; k < d.K; ++k) {
      double ref = 0;
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t p = 0; p < OH * OW; ++p) ref += gp[(n * d.K + k) * OH * OW + p];
      worst = std::max(worst, std::fabs(ref - db.data<double>()[k]));
    }
    CHECK(worst <= 1e-12);
  }
}

TEST_CASE("nn::ConvTranspose2d and nn::Upsample: torch's parameter layout, init bounds and shapes") {
  manual_seed(5);
  nn::ConvTranspose2dOptions o;
  o.in_channels = 8, o.out_channels = 6, o.kernel = 3, o.stride = 2, o.padding = 1, o.output_padding = 1, o.groups = 2;
  nn::ConvTranspose2d m(o);
  REQUIRE(m.weight.sizes() == Shape{8, 3, 3, 3});
  REQUIRE(m.bias.sizes() == Shape{6});
  const double bound = 1.0 / std::sqrt(3.0 * 9.0);  // fan_in = weight.size(1) * 3 * 3, as torch
  for (double v : m.weight.to_vector<double>()) CHECK(std::fabs(v) <= bound);
  for (double v : m.bias.to_vector<double>()) CHECK(std::fabs(v) <= bound);
  double spread = 0;
  for (double v : m.weight.to_vector<double>()) spread = std::max(spread, std::fabs(v));
  CHECK(spread > 0.8 * bound);  // 216 draws of U(-b, b): the largest is above 0.8 b with certainty in practice
  auto names = m.named_parameters();
  REQUIRE(names.size() == 2);
  CHECK(names[0].first == "weight");
  CHECK(names[1].first == "bias");
  CHECK(m(uniform({2, 8, 5, 4}, -1, 1)).sizes() == Shape{2, 6, 10, 8});
  nn::UpsampleOptions u;
  u.scale_factor = {2.0};
  u.mode = InterpMode::bilinear;
  CHECK(nn::Upsample(u)(uniform({1, 3, 5, 4}, -1, 1)).sizes() == Shape{1, 3, 10, 8});
  nn::UpsampleOptions s;
  s.size = {7, 3};
  CHECK(nn::Upsample(s)(uniform({1, 3, 5, 4}, -1, 1)).sizes() == Shape{1, 3, 7, 3});
}

namespace {

// A small decoder: conv, a transposed conv (stride 2, output_padding 1) and a bilinear upsample of
// the same map concatenated, a nearest resize by 1.5, global average, linear. x: (N, 3, 9, 9).
class UpNet : public nn::Module {
 public:
  UpNet() : Module("UpNet") {
    stem = register_module("stem", std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1));
    nn::ConvTranspose2dOptions o;
    o.in_channels = 8, o.out_channels = 6, o.kernel = 3, o.stride = 2, o.padding = 1, o.output_padding = 1;
    up = register_module("up", std::make_shared<nn::ConvTranspose2d>(o));
    nn::UpsampleOptions b;
    b.scale_factor = {2.0};
    b.mode = InterpMode::bilinear;
    resize = register_module("resize", std::make_shared<nn::Upsample>(b));
    nn::UpsampleOptions n;
    n.scale_factor = {1.5};
    grow = register_module("grow", std::make_shared<nn::Upsample>(n));
    head = register_module("head", std::make_shared<nn::Linear>(14, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = relu((*stem)(x));                          // (N, 8, 9, 9)
    Tensor z = cat({(*up)(y), (*resize)(y)}, 1);          // (N, 14, 18, 18)
    return (*head)(mean((*grow)(relu(z)), {2, 3}));       // (N, 14, 27, 27) -> (N, 10)
  }
  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::ConvTranspose2d> up;
  std::shared_ptr<nn::Upsample> resize, grow;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace

TEST_CASE("memory predictor with conv_transpose2d and interpolate: predicted peak == measured CPU peak") {
  const int64_t batch = 4;
  auto make_model = [] { return nn::ModulePtr(std::make_shared<UpNet>()); };
  auto make_opt = [](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
    optim::SGDOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    return std::make_unique<optim::SGD>(m.named_parameters(), o);
  };
  train::PredictOptions po;
  po.batch = batch;
  po.input_shape = {3, 9, 9};
  po.target = Device::cpu();
  const StepMemory p = train::predict_step_memory(make_model, make_opt, po);
  CachingAllocator* cpu = caching_allocator_for(Device::cpu());
  REQUIRE(cpu != nullptr);
  manual_seed(0);
  nn::ModulePtr model = make_model();
  model->train();
  std::unique_ptr<optim::Optimizer> opt = make_opt(*model);
  optim::LossScalerOptions off;
  off.enabled = false;
  optim::LossScaler scaler(off);
  for (int s = 0; s < 2; ++s) {
    cpu->reset_peak();
    const int64_t before = cpu->stats().total.allocated.current;
    Tensor x, y;
    {
      MemoryScope tag(MemoryTag::data);
      x = uniform({batch, 3, 9, 9}, -1, 1);
      y = empty({batch}, DType::i64);
    }
    for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % 10;
    train::train_step(*model, *opt, scaler, Batch{x, y}, po.step);
    x = Tensor(), y = Tensor();
    const int64_t measured = cpu->stats().total.allocated.peak;
    const int64_t predicted = s == 0 ? p.first.allocated : p.steady.allocated;
    MESSAGE("step ", s + 1, ": measured peak ", measured, " bytes, predicted ", predicted, " (held before the step ",
            before, ")");
    CHECK(measured == predicted);
  }
  // The transposed conv's saved input and the activations of the upsampled maps are in the prediction.
  CHECK(p.activations >= batch * (8 * 9 * 9 + 14 * 18 * 18) * 4);
}

TEST_CASE("autocast: conv_transpose2d runs in f16 like conv2d, interpolate follows its input") {
  manual_seed(9);
  Tensor x = uniform({2, 4, 5, 5}, -1, 1), w = uniform({4, 3, 3, 3}, -1, 1).set_requires_grad(true);
  Tensor b = uniform({3}, -1, 1).set_requires_grad(true);
  // The reference: f32 compute on the f16-rounded operands (what the f16 path computes before its one rounding).
  auto r16 = [](const Tensor& t) { return to_dtype(to_dtype(t.detach(), DType::f16), DType::f32); };
  Tensor ref = conv_transpose2d(r16(x), r16(w), r16(b), {2}, {1}, {1});
  Tensor y, up32, up16;
  {
    AutocastGuard on;
    y = conv_transpose2d(x, w, b, {2}, {1}, {1});
    up32 = interpolate(x, {}, {2.0}, InterpMode::bilinear);
    up16 = interpolate(to_dtype(x, DType::f16), {}, {1.5});
  }
  CHECK(y.dtype() == DType::f16);
  CHECK(up32.dtype() == DType::f32);
  CHECK(up16.dtype() == DType::f16);
  CHECK(up16.sizes() == Shape{2, 4, 7, 7});
  // f16 operands, f32 compute, one round-to-nearest to f16: at most half an f16 ulp (2^-11 relative,
  // or 2^-25 absolute among subnormals) from the reference, element by element.
  std::vector<double> a = to_dtype(y, DType::f32).to_vector<double>(), r = ref.to_vector<double>();
  REQUIRE(a.size() == r.size());
  int off = 0;
  for (size_t i = 0; i < a.size(); ++i) off += std::fabs(a[i] - r[i]) > std::fabs(r[i]) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
  CHECK(off == 0);
  // The master weights get f32 gradients through the f16 op.
  sum(to_dtype(y, DType::f32)).backward();
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  CHECK(w.grad().sizes() == w.sizes());
}
