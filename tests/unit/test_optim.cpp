// Optimizers against steps computed by hand (in double), fused vs generic paths, weight-decay
// exclusion, state dicts, gradient clipping, and gradient accumulation equivalence.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/core/meta_target.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/ops/ops.h"
#include "engine/optim/adamw.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/sgd.h"
#include "kernels/cpu/optim_update.h"

using namespace kiln;
using namespace kiln::optim;

namespace {
Tensor leaf(const std::vector<float>& v) {
  Tensor t = tensor_from<float>(v, {(int64_t)v.size()});
  t.set_requires_grad(true);
  return t;
}
void set_grad(Tensor& p, const std::vector<float>& g) { p.set_grad(tensor_from<float>(g, {(int64_t)g.size()})); }
void check_close(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  auto got = t.to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
}
}  // namespace

TEST_CASE("SGD momentum + weight decay + nesterov match hand-computed steps (fused and generic)") {
  for (bool fused : {true, false})
    for (bool nesterov : {false, true}) {
      CAPTURE(fused);
      CAPTURE(nesterov);
      Tensor p = leaf({1.0f, -2.0f, 0.5f});
      SGDOptions o;
      o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 0.01, o.nesterov = nesterov;
      SGD opt({{"p", p}}, o);
      opt.set_fused(fused);
      std::vector<double> pv = {1.0, -2.0, 0.5}, buf(3);
      const std::vector<std::vector<float>> grads = {{0.5f, -1.0f, 2.0f}, {-0.25f, 0.75f, 1.0f}, {0.1f, 0.2f, -0.3f}};
      for (size_t s = 0; s < grads.size(); ++s) {
        set_grad(p, grads[s]);
        opt.step();
        for (int i = 0; i < 3; ++i) {
          double d = grads[s][i] + 0.01 * pv[i];
          buf[i] = s == 0 ? d : 0.9 * buf[i] + d;  // torch: first buffer = first gradient
          double upd = nesterov ? d + 0.9 * buf[i] : buf[i];
          pv[i] -= 0.1 * upd;
        }
        check_close(p, pv);
      }
    }
}

TEST_CASE("plain SGD without momentum keeps no state") {
  Tensor p = leaf({1.0f, 2.0f});
  SGD opt({{"p", p}}, SGDOptions{0.5, 0, 0, 0, false});
  set_grad(p, {2.0f, -2.0f});
  opt.step();
  check_close(p, {0.0, 3.0});
  CHECK(opt.state_dict().size() == 3);  // step, group.0.lr, group.0.initial_lr
}

TEST_CASE("AdamW matches hand-computed steps with PyTorch defaults (fused and generic)") {
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    Tensor p = leaf({1.0f, -2.0f, 0.5f, 0.0f});
    AdamWOptions o;  // defaults lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 1e-2
    CHECK(o.lr == 1e-3);
    CHECK(o.weight_decay == 1e-2);
    o.lr = 0.05;
    AdamW opt({{"p", p}}, o);
    opt.set_fused(fused);
    std::vector<double> pv = {1.0, -2.0, 0.5, 0.0}, m(4), v(4);
    const std::vector<std::vector<float>> grads = {{0.5f, -1.0f, 2.0f, 0.0f}, {-0.25f, 0.75f, 1.0f, 1e-3f}};
    for (size_t s = 0; s < grads.size(); ++s) {
      set_grad(p, grads[s]);
      opt.step();
      double t = (double)s + 1, bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
      for (int i = 0; i < 4; ++i) {
        double g = grads[s][i];
        pv[i] *= 1 - 0.05 * 0.01;
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        pv[i] -= (0.05 / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
      }
      check_close(p, pv, 1e-5);
    }
  }
}

TEST_CASE("weight decay exclusion by predicate leaves excluded parameters undecayed") {
  Tensor w = tensor_from<float>({1, 1, 1, 1}, {2, 2});
  w.set_requires_grad(true);
  Tensor b = leaf({1.0f, 1.0f});
  SGDOptions o;
  o.lr = 1.0, o.weight_decay = 0.5;
  SGD opt({{"fc.weight", w}, {"fc.bias", b}}, o, no_decay_bias_and_norm);
  REQUIRE(opt.param_groups().size() == 2);
  w.set_grad(zeros({2, 2}));
  set_grad(b, {0.0f, 0.0f});
  opt.step();
  check_close(w, {0.5, 0.5, 0.5, 0.5});
  check_close(b, {1.0, 1.0});
}

TEST_CASE("parameters without a gradient are skipped") {
  Tensor a = leaf({1.0f}), b = leaf({2.0f});
  AdamW opt({{"a", a}, {"b", b}}, AdamWOptions{});
  set_grad(a, {1.0f});
  opt.step();
  CHECK(a.to_vector<float>()[0] != 1.0f);
  CHECK(b.to_vector<float>()[0] == 2.0f);
}

TEST_CASE("optimizer state_dict round trip continues identically") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    Tensor p1 = leaf({0.3f, -0.7f}), p2 = leaf({0.3f, -0.7f});
    auto make = [&](Tensor& p) -> std::unique_ptr<Optimizer> {
      if (kind == 0) return std::make_unique<SGD>(NamedTensors{{"w", p}}, SGDOptions{0.1, 0.9, 0, 1e-3, false});
      AdamWOptions o;
      o.lr = 0.01;
      return std::make_unique<AdamW>(NamedTensors{{"w", p}}, o);
    };
    auto a = make(p1);
    set_grad(p1, {1.0f, 2.0f});
    a->step();
    // p2 gets p1's weights and a's state; both then take the same step.
    { NoGradGuard ng; copy_(p2, p1); }
    auto b = make(p2);
    NamedTensors sd;
    for (auto& [n, t] : a->state_dict()) sd.emplace_back(n, clone(t));
    b->load_state_dict(sd);
    CHECK(b->steps_taken() == 1);
    set_grad(p1, {-0.5f, 0.25f});
    set_grad(p2, {-0.5f, 0.25f});
    a->step();
    b->step();
    auto x = p1.to_vector<float>(), y = p2.to_vector<float>();
    CHECK(x[0] == y[0]);
    CHECK(x[1] == y[1]);
  }
  Tensor p = leaf({1.0f});
  SGD opt({{"w", p}}, SGDOptions{0.1, 0.9, 0, 0, false});
  CHECK_THROWS_AS(opt.load_state_dict({{"state.nope.momentum_buffer", zeros({1})}}), Error);
}

TEST_CASE("clip_grad_norm returns the total norm and scales gradients above max_norm") {
  Tensor a = leaf({3.0f}), b = leaf({0.0f, 4.0f}), c = leaf({9.0f});
  set_grad(a, {3.0f});
  set_grad(b, {0.0f, 4.0f});
  double n = clip_grad_norm({a, b, c}, 1.0);  // c has no gradient
  CHECK(n == doctest::Approx(5.0));
  check_close(a.grad(), {0.6}, 1e-5);
  check_close(b.grad(), {0.0, 0.8}, 1e-5);
  n = clip_grad_norm({a, b}, 10.0);  // below: unchanged
  CHECK(n == doctest::Approx(1.0).epsilon(1e-5));
  check_close(a.grad(), {0.6}, 1e-5);
}

TEST_CASE("gradient accumulation: N micro-batches with loss/N equal one large batch (no BatchNorm)") {
  const int64_t N = 8, accum = 4;
  manual_seed(11);
  auto make = [] {
    manual_seed(5);
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(6, 16));
    s->push_back(std::make_shared<nn::ReLU>());
    s->push_back(std::make_shared<nn::Linear>(16, 3));
    return s;
  };
  Tensor x = randn({N, 6}), t = randn({N, 3});
  auto loss_of = [](nn::Module& m, const Tensor& xb, const Tensor& tb) {
    Tensor d = sub(m(xb), tb);
    return mean(mul(d, d));
  };
  auto big = make(), small = make();
  SGDOptions o;
  o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 1e-3;
  SGD opt_big(big->named_parameters(), o), opt_small(small->named_parameters(), o);
  for (int step = 0; step < 3; ++step) {
    opt_big.zero_grad();
    loss_of(*big, x, t).backward();
    opt_big.step();
    opt_small.zero_grad();
    const int64_t mb = N / accum;
    for (int64_t k = 0; k < accum; ++k) {
      Tensor l = loss_of(*small, narrow(x, 0, k * mb, mb), narrow(t, 0, k * mb, mb));
      mul(l, 1.0 / accum).backward();
    }
    opt_small.step();
  }
  auto pb = big->named_parameters(), ps = small->named_parameters();
  for (size_t i = 0; i < pb.size(); ++i) {
    CAPTURE(pb[i].first);
    auto a = pb[i].second.to_vector<float>(), b = ps[i].second.to_vector<float>();
    for (size_t j = 0; j < a.size(); ++j) CHECK(a[j] == doctest::Approx(b[j]).epsilon(1e-5));
  }
  // And it actually trained (the check above is not vacuous).
  manual_seed(5);
  auto fresh = make();
  CHECK(fresh->named_parameters()[0].second.to_vector<float>()[0] != pb[0].second.to_vector<float>()[0]);
}

TEST_CASE("meta optimizer steps take the imitated device's fused path (cpu and cuda allocate no temporaries)") {
  // kiln mem predicts a run by stepping on meta; the fused update (CPU loop or CUDA kernel) works
  // in place, the generic one allocates d = g + wd*p and friends. The prediction must follow the
  // path the real device takes: fused on cpu and cuda alike.
  CachingAllocator* meta = caching_allocator_for(Device::meta());
  REQUIRE(meta != nullptr);
  for (Device target : {Device::cpu(), Device::cuda(0)}) {
    for (bool fused : {true, false}) {
      CAPTURE(target.str());
      CAPTURE(fused);
      MetaTargetScope scope(target);
      Tensor p = empty({64, 32}, DType::f32, Device::meta()).set_requires_grad(true);
      SGD sgd({{"p", p}}, SGDOptions{0.1, 0.9, 0.0, 1e-2, true});
      AdamW adamw({{"p", p}}, AdamWOptions{});
      sgd.set_fused(fused);
      adamw.set_fused(fused);
      p.set_grad(empty({64, 32}, DType::f32, Device::meta()));
      sgd.step();    // creates the momentum buffer
      adamw.step();  // creates exp_avg, exp_avg_sq
      const uint64_t before = meta->stats().num_allocs;
      sgd.step();
      adamw.step();
      const uint64_t temporaries = meta->stats().num_allocs - before;
      if (fused) CHECK(temporaries == 0);
      else CHECK(temporaries > 0);
    }
  }
}

// The CPU fused loops (kernels/cpu/optim_update.cpp) are vectorized and split over threads; each
// element must still be the same bits as the scalar rule of kernels/common/update_rules.h. Lengths
// below and above the parallel threshold (65536) and not a multiple of any vector width; every
// combination of SGD's options; gradients with NaN, inf, huge and denormal values.
TEST_CASE("fused CPU SGD and AdamW loops give the scalar rule's bits on every element") {
  for (int64_t n : {(int64_t)37, (int64_t)65536 + 129}) {
    CAPTURE(n);
    std::vector<float> p0((size_t)n), g((size_t)n), b0((size_t)n), v0((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
      p0[(size_t)i] = std::sin(0.37f * (float)i) * 3.f;
      g[(size_t)i] = std::cos(0.11f * (float)i) * (i % 7 == 0 ? 1e30f : 0.5f);
      b0[(size_t)i] = std::sin(0.05f * (float)i);
      v0[(size_t)i] = std::fabs(b0[(size_t)i]) * 1e-3f;
    }
    g[3] = NAN;
    g[5] = INFINITY;
    g[6] = 1e-42f;
    for (int mask = 0; mask < 16; ++mask)
      for (bool first : {false, true}) {
        CAPTURE(mask);
        const SgdParams h{0.05f, (mask & 1) ? 0.9f : 0.f, (mask & 2) ? 0.1f : 0.f, (mask & 4) ? 1e-4f : 0.f,
                          (mask & 8) != 0};
        std::vector<float> p = p0, b = b0, pw = p0, bw = b0;
        cpu::sgd_fused(p.data(), g.data(), (mask & 1) ? b.data() : nullptr, n, first, h);
        for (int64_t i = 0; i < n; ++i) {
          float dummy = 0.f;
          sgd_update(pw[(size_t)i], g[(size_t)i], (mask & 1) ? bw[(size_t)i] : dummy, first, h);
        }
        CHECK(std::memcmp(p.data(), pw.data(), sizeof(float) * (size_t)n) == 0);
        CHECK(std::memcmp(b.data(), bw.data(), sizeof(float) * (size_t)n) == 0);
      }
    const AdamWParams h{2e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 2e-3f / 0.1f, std::sqrt(1.f - 0.999f)};
    std::vector<float> p = p0, m = b0, v = v0, pw = p0, mw = b0, vw = v0;
    cpu::adamw_fused(p.data(), g.data(), m.data(), v.data(), n, h);
    for (int64_t i = 0; i < n; ++i)
      adamw_update(pw[(size_t)i], g[(size_t)i], mw[(size_t)i], vw[(size_t)i], h);
    CHECK(std::memcmp(p.data(), pw.data(), sizeof(float) * (size_t)n) == 0);
    CHECK(std::memcmp(m.data(), mw.data(), sizeof(float) * (size_t)n) == 0);
    CHECK(std::memcmp(v.data(), vw.data(), sizeof(float) * (size_t)n) == 0);
  }
}
