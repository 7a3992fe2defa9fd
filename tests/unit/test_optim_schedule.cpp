// LR schedules: step, cosine, warm-up (and their composition), the spec parser, and applying a
// schedule to an optimizer's groups.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "engine/ops/ops.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/sgd.h"

using namespace kiln;
using namespace kiln::optim;

TEST_CASE("StepLR: gamma^(step / step_size)") {
  StepLR s(3, 0.5);
  CHECK(s.factor(0) == 1.0);
  CHECK(s.factor(2) == 1.0);
  CHECK(s.factor(3) == 0.5);
  CHECK(s.factor(7) == 0.25);
  CHECK_THROWS_AS(StepLR(0, 0.1), Error);
}

TEST_CASE("CosineLR: 1 at 0, min at total, midpoint halfway") {
  CosineLR c(10, 0.1);
  CHECK(c.factor(0) == doctest::Approx(1.0));
  CHECK(c.factor(5) == doctest::Approx(0.55));
  CHECK(c.factor(10) == doctest::Approx(0.1));
  CHECK(c.factor(20) == doctest::Approx(0.1));
  CHECK(c.factor(2) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.2))));
}

TEST_CASE("WarmupLR ramps linearly, then hands over to the next schedule from its step 0") {
  auto w = WarmupLR(4, 0.25, std::make_shared<StepLR>(2, 0.1));
  CHECK(w.factor(0) == doctest::Approx(0.25));
  CHECK(w.factor(2) == doctest::Approx(0.625));
  CHECK(w.factor(4) == doctest::Approx(1.0));
  CHECK(w.factor(5) == doctest::Approx(1.0));
  CHECK(w.factor(6) == doctest::Approx(0.1));
}

TEST_CASE("RampLR scales the unshifted schedule by (step + 1) / W for W steps (kiln train's --warmup)") {
  RampLR r(4, std::make_shared<StepLR>(2, 0.5));
  CHECK(r.factor(0) == doctest::Approx(0.25));
  CHECK(r.factor(1) == doctest::Approx(0.5));
  CHECK(r.factor(2) == doctest::Approx(0.75 * 0.5));  // the step schedule already decayed underneath
  CHECK(r.factor(3) == doctest::Approx(1.0 * 0.5));
  CHECK(r.factor(4) == doctest::Approx(0.25));
  CHECK(RampLR(3).factor(1) == doctest::Approx(2.0 / 3.0));
  CHECK(RampLR(3).factor(3) == 1.0);
  CHECK(RampLR(0).factor(0) == 1.0);
  CHECK_THROWS_AS(RampLR(-1), Error);
}

TEST_CASE("parse_schedule builds composed schedules and rejects bad specs") {
  CHECK(parse_schedule("constant", 10)->factor(7) == 1.0);
  CHECK(parse_schedule("step:2:0.5", 10)->factor(5) == doctest::Approx(0.25));
  auto wc = parse_schedule("warmup:2+cosine", 12);  // cosine spans the remaining 10 steps
  CHECK(wc->factor(0) == doctest::Approx(0.5));
  CHECK(wc->factor(2) == doctest::Approx(1.0));
  CHECK(wc->factor(7) == doctest::Approx(0.5));
  CHECK(wc->factor(12) == doctest::Approx(0.0));
  for (std::string bad : {"", "cos", "step", "step:x", "warmup:2+warmup:3", "cosine+step:2"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_schedule(bad, 10), Error);
  }
  try {
    parse_schedule("linear", 10);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("linear") != std::string::npos);
    CHECK(std::string(e.what()).find("cosine") != std::string::npos);
  }
}

TEST_CASE("apply_schedule scales every group's initial lr") {
  Tensor a = zeros({2}), b = zeros({2});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  SGD opt({ParamGroup{{{"a", a}}, 0.1, 0.0}, ParamGroup{{{"b", b}}, 0.02, 0.0}}, SGDOptions{});
  apply_schedule(opt, StepLR(1, 0.5), 2);
  CHECK(opt.param_groups()[0].lr == doctest::Approx(0.025));
  CHECK(opt.param_groups()[1].lr == doctest::Approx(0.005));
  apply_schedule(opt, ConstantLR(), 5);
  CHECK(opt.lr() == doctest::Approx(0.1));
}
