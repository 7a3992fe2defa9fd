// LossScaler: growth after N clean steps, backoff and a skipped step on inf/NaN, the device state
// agreeing with the host mirror, one host synchronization per step; and, with autocast, a run
// whose scale is forced to overflow (skips, backs off, recovers and trains) and gradients that
// underflow in f16 without scaling but survive with it.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/core/generator.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "support/tensor_host.h"

using namespace kiln;
using namespace kiln::optim;

namespace {

Tensor leaf(const std::vector<float>& v) {
  Tensor t = tensor_from<float>(v, {(int64_t)v.size()});
  t.set_requires_grad(true);
  return t;
}

// A 2-layer MLP on a fixed, learnable problem (class = argmax of the first 3 features).
struct Problem {
  std::shared_ptr<nn::Sequential> model;
  Tensor x, y;
};

Problem make_problem(uint64_t seed) {
  manual_seed(seed);
  Problem p;
  p.model = std::make_shared<nn::Sequential>();
  p.model->push_back(std::make_shared<nn::Linear>(8, 16));
  p.model->push_back(std::make_shared<nn::ReLU>());
  p.model->push_back(std::make_shared<nn::Linear>(16, 3));
  p.x = randn({32, 8});
  Tensor first3 = narrow(p.x, 1, 0, 3);
  p.y = argmax(first3, 1);
  return p;
}

Tensor amp_loss(Problem& p) {
  AutocastGuard on;
  return cross_entropy((*p.model)(p.x), p.y);
}

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> s;
  for (const Tensor& t : m.parameters()) s.push_back(clone(t.detach()));
  return s;
}

bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].to_vector<float>() != b[i].to_vector<float>()) return false;
  return true;
}

}  // namespace

TEST_CASE("LossScaler: GradScaler defaults") {
  LossScaler s;
  CHECK(s.current_scale() == 65536.0);
  CHECK(s.options().growth_interval == 2000);
  CHECK(s.options().growth_factor == 2.0);
  CHECK(s.options().backoff_factor == 0.5);
  CHECK(s.scale_tensor().item() == 65536.0);
  CHECK(s.scale(scalar_tensor(3.0)).item() == 3.0 * 65536.0);
}

TEST_CASE("LossScaler: grows after N clean steps, backs off and skips on inf/NaN, one sync per step") {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  Tensor p = leaf({1.0f, 2.0f});
  SGD opt(NamedTensors{{"p", p}}, SGDOptions{1.0});
  auto step_with_grad = [&](float g0) {
    p.set_grad(tensor_from<float>({g0 * (float)s.current_scale(), 0.0f}, {2}));
    const bool ran = s.step(opt);
    s.update();
    CHECK(s.scale_tensor().item() == s.current_scale());  // device state == host mirror
    CHECK(s.growth_tracker_tensor().item() == (double)s.growth_tracker());
    CHECK(s.found_inf_tensor().item() == 0.0);
    return ran;
  };
  const double scales[] = {1024, 1024, 2048, 2048, 2048, 4096, 4096};
  for (int i = 0; i < 7; ++i) {
    CAPTURE(i);
    CHECK(step_with_grad(0.5f));
    CHECK(s.current_scale() == scales[i]);
  }
  CHECK(s.growth_tracker() == 1);
  CHECK(p.to_vector<float>()[0] == doctest::Approx(1.0 - 7 * 0.5));  // unscaled gradient applied
  const float before = p.to_vector<float>()[0];
  CHECK_FALSE(step_with_grad(std::numeric_limits<float>::infinity()));
  CHECK(p.to_vector<float>()[0] == before);  // skipped
  CHECK(s.current_scale() == 2048);
  CHECK(s.growth_tracker() == 0);
  CHECK_FALSE(step_with_grad(std::nanf("")));
  CHECK(s.current_scale() == 1024);
  CHECK(s.skipped_steps() == 2);
  CHECK(s.last_step_skipped());
  CHECK(step_with_grad(0.25f));
  CHECK(p.to_vector<float>()[0] == doctest::Approx(before - 0.25));
  CHECK(s.host_syncs() == 10);  // exactly one per step
}

TEST_CASE("LossScaler: unscale_ before clipping, only once per step, growth never overflows f32") {
  LossScaler s;
  Tensor p = leaf({0.0f});
  p.set_grad(tensor_from<float>({3.0f * 65536.0f}, {1}));
  s.unscale_({p});
  CHECK(p.grad().to_vector<float>()[0] == 3.0f);
  CHECK_THROWS_AS(s.unscale_({p}), Error);
  s.update();
  CHECK(s.host_syncs() == 1);  // update() read found_inf since step() did not

  LossScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  o.growth_interval = 1;
  LossScaler big(o);
  Tensor q = leaf({0.0f});
  SGD opt(NamedTensors{{"q", q}}, SGDOptions{0.1});
  q.set_grad(tensor_from<float>({1.0f}, {1}));
  CHECK(big.step(opt));
  big.update();
  CHECK(big.current_scale() == std::ldexp(1.0, 127));
  CHECK(big.scale_tensor().item() == std::ldexp(1.0, 127));
  CHECK_THROWS_AS((void)LossScaler(LossScalerOptions{-1.0}), Error);
}

TEST_CASE("LossScaler: disabled is a pass-through") {
  LossScalerOptions o;
  o.enabled = false;
  LossScaler s(o);
  Tensor p = leaf({1.0f});
  SGD opt(NamedTensors{{"p", p}}, SGDOptions{1.0});
  p.set_grad(tensor_from<float>({std::numeric_limits<float>::infinity()}, {1}));
  CHECK(s.scale(scalar_tensor(2.0)).item() == 2.0);
  CHECK(s.step(opt));  // no inf check without scaling
  s.update();
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("amp: a scale forced to overflow skips steps, backs off, recovers and trains") {
  Problem pb = make_problem(21);
  LossScalerOptions o;
  o.init_scale = std::ldexp(1.0, 40);
  LossScaler scaler(o);
  SGD opt(pb.model->named_parameters(), SGDOptions{0.2});
  double first_loss = -1, last_loss = -1;
  int64_t first_clean = -1;
  for (int64_t step = 0; step < 80; ++step) {
    CAPTURE(step);
    pb.model->zero_grad();
    Tensor loss = amp_loss(pb);
    scaler.scale(loss).backward();
    const double scale_before = scaler.current_scale();
    std::vector<Tensor> before = snapshot(*pb.model);
    const bool ran = scaler.step(opt);
    scaler.update();
    if (!ran) {
      CHECK(same(before, snapshot(*pb.model)));  // weights unchanged on a skipped step
      CHECK(scaler.current_scale() == scale_before / 2);
    } else {
      CHECK_FALSE(same(before, snapshot(*pb.model)));
      if (first_clean < 0) {
        first_clean = step;
        first_loss = loss.item();
      }
      last_loss = loss.item();
    }
  }
  MESSAGE("first clean step " << first_clean << ", scale " << scaler.current_scale() << ", loss " << first_loss
                              << " -> " << last_loss);
  CHECK(first_clean > 0);                       // the first steps overflowed...
  CHECK(scaler.skipped_steps() >= first_clean);  // ...and were all skipped
  CHECK(scaler.skipped_steps() < 40);            // then it recovered
  CHECK(scaler.current_scale() < std::ldexp(1.0, 40));
  for (const Tensor& p : pb.model->parameters())
    CHECK(isfinite_all(p).item() == 1.0);
  CHECK(last_loss < 0.7 * first_loss);  // and trains
}

TEST_CASE("amp: gradients that underflow in f16 survive with loss scaling") {
  // A tiny loss: its f16 gradients (below 2^-24) flush to zero without scaling.
  Problem pb = make_problem(33);
  const double tiny = 3e-7;  // f16 gradients of the logits ~ 1e-8 unscaled, ~ 6e-4 scaled by 2^16
  auto grads = [&](bool amp, double scale) {
    pb.model->zero_grad();
    Tensor loss;
    {
      AutocastGuard g(amp);
      loss = cross_entropy((*pb.model)(pb.x), pb.y);
    }
    mul(loss, tiny * scale).backward();
    std::vector<Tensor> gs;
    for (const Tensor& p : pb.model->parameters()) gs.push_back(mul(clone(p.grad()), 1.0 / scale));
    return gs;
  };
  std::vector<Tensor> ref = grads(false, 1.0), raw = grads(true, 1.0);
  LossScaler scaler;  // 2^16
  pb.model->zero_grad();
  Tensor loss;
  {
    AutocastGuard g;
    loss = cross_entropy((*pb.model)(pb.x), pb.y);
  }
  scaler.scale(mul(loss, tiny)).backward();
  scaler.unscale_(pb.model->parameters());
  std::vector<Tensor> params = pb.model->parameters();
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    const double err_raw = test::rel_error(raw[i], ref[i]);
    const double err_scaled = test::rel_error(params[i].grad(), ref[i]);
    MESSAGE("param " << i << ": relative error unscaled " << err_raw << ", scaled " << err_scaled);
    CHECK(err_raw > 0.5);      // lost to underflow
    CHECK(err_scaled < 1e-2);  // survives
  }
  CHECK(scaler.found_inf_tensor().item() == 0.0);
}

TEST_CASE("LossScaler: an f16 loss backs the scale off to at most 65504 instead of skipping steps") {
  // The same MLP step twice: (a) the loss cast to f16 under the default scale 2^16 (65536 is inf
  // in f16: before the back-off every first step was skipped), (b) the f32 loss under 2^15, the
  // scale (a) backs off to. Scaling by a power of two is exact, so the steps agree bit for bit.
  auto run = [](bool f16_loss, double init_scale, int64_t growth_interval) {
    Problem p = make_problem(7);
    LossScalerOptions o;
    o.init_scale = init_scale;
    o.growth_interval = growth_interval;
    LossScaler s(o);
    SGD opt(p.model->named_parameters(), SGDOptions{0.1});
    std::vector<bool> stepped;
    std::vector<double> scales;
    for (int k = 0; k < 3; ++k) {
      p.model->zero_grad();
      Tensor loss = amp_loss(p);
      if (f16_loss) loss = to_dtype(loss, DType::f16);
      s.scale(loss).backward();
      stepped.push_back(s.step(opt));
      s.update();
      scales.push_back(s.current_scale());
    }
    return std::make_tuple(snapshot(*p.model), stepped, scales, s.skipped_steps(), s.f16_backoffs(),
                           s.scale_tensor().item());
  };
  auto [w16, stepped16, scales16, skipped16, backoffs16, dev16] = run(true, 65536.0, 2000);
  auto [w32, stepped32, scales32, skipped32, backoffs32, dev32] = run(false, 32768.0, 2000);
  CHECK(stepped16 == std::vector<bool>{true, true, true});
  CHECK(skipped16 == 0);
  CHECK(backoffs16 == 1);  // once: the scale then stays at 2^15
  CHECK(scales16 == std::vector<double>{32768.0, 32768.0, 32768.0});
  CHECK(dev16 == 32768.0);  // the device scale agrees with the host mirror
  CHECK(backoffs32 == 0);
  CHECK(same(w16, w32));
  // Growth past 65504 (every step here) is backed off again at the next f16 scale(): no step is skipped.
  auto [wg, steppedg, scalesg, skippedg, backoffsg, devg] = run(true, 65536.0, 1);
  CHECK(steppedg == std::vector<bool>{true, true, true});
  CHECK(skippedg == 0);
  CHECK(backoffsg == 3);
  CHECK(scalesg == std::vector<double>{65536.0, 65536.0, 65536.0});  // grown by update(), after the step
  CHECK(devg == 65536.0);
}
