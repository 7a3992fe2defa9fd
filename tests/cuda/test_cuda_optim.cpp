// Fused optimizer kernels (kernels/cuda/optim_update.cu) against the fused CPU loop: the same
// parameters and gradients on both devices, several steps of SGD (plain, momentum + weight decay,
// dampening, Nesterov) and AdamW, then parameters and optimizer state compared. Tensor sizes cover
// one element, a partial block and more elements than one grid-stride pass. Without a GPU each
// test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/ops.h"
#include "engine/optim/adamw.h"
#include "engine/optim/sgd.h"

#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "support/cuda_test.h"
#include "kernels/common/cuda_backend.h"

using namespace kiln;
using kiln_test::skip_without_gpu;
using kiln_test::kGpu;
using namespace kiln::optim;

namespace {

// Both sides evaluate the same float expressions of update_rules.h; they differ only where nvcc
// contracts a*b+c into one FMA (one rounding instead of two) and the host compiler does not. That
// is <= 1 ulp per operation, a few ulp per step: 1e-5 of the largest element over a few steps
// leaves two orders of magnitude of room and still catches any wrong term (>= 1e-3).
constexpr double kTol = 1e-5;

// max |a - b| / max |a| (a: the CPU result).
double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = to_device(b.detach(), Device::cpu()).to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(y[i]) != std::isnan(x[i])) return INFINITY;
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(x[i]));
  }
  return num / den;
}

// Sizes: 1, a partial block, and more than grid_for's cap x 256 threads (forces the grid-stride loop).
// In the CPU mode (kiln_tests_cuda_cpu) the last is 4099, several blocks but no grid-stride pass: 2^21
// elements took 15-20 s per test there (every thread a fibre), past the cuda-cpu label's budget.
const std::vector<Shape> kShapes = {{1}, {33, 65}, {kiln_test::cpu_mode() ? int64_t(4099) : (int64_t(1) << 21) + 7}};

struct Pair {
  NamedTensors cpu, gpu;
};

Pair make_params() {
  manual_seed(11);
  Pair p;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const std::string name = "p" + std::to_string(i);
    Tensor c = uniform(kShapes[i], -1, 1);
    c.set_requires_grad(true);
    Tensor g = to_device(c.detach(), kGpu);
    g.set_requires_grad(true);
    p.cpu.emplace_back(name, c);
    p.gpu.emplace_back(name, g);
  }
  return p;
}

// Same random gradient on both devices (drawn on the cpu, copied).
void set_grads(Pair& p, int step) {
  manual_seed(100 + (uint64_t)step);
  for (size_t i = 0; i < p.cpu.size(); ++i) {
    Tensor g = uniform(p.cpu[i].second.sizes(), -2, 2);
    p.cpu[i].second.set_grad(g);
    p.gpu[i].second.set_grad(to_device(g, kGpu));
  }
}

void compare_state(const Optimizer& cpu_opt, const Optimizer& gpu_opt, const Pair& p, const std::string& what) {
  for (size_t i = 0; i < p.cpu.size(); ++i) {
    const double e = rel_err(p.cpu[i].second, p.gpu[i].second);
    INFO(what << " " << p.cpu[i].first << " " << p.cpu[i].second.str() << ": relative error " << e);
    CHECK(e <= kTol);
  }
  NamedTensors a = cpu_opt.state_dict(), b = gpu_opt.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    if (a[i].first.rfind("state.", 0) != 0) continue;
    if (a[i].first.size() >= 5 && a[i].first.compare(a[i].first.size() - 5, 5, ".step") == 0) {
      CHECK(a[i].second.item() == to_device(b[i].second, Device::cpu()).item());
      continue;
    }
    const double e = rel_err(a[i].second, b[i].second);
    INFO(what << " " << a[i].first << ": relative error " << e);
    CHECK(e <= kTol);
  }
}

}  // namespace

TEST_CASE("cuda: fused SGD kernel matches the fused CPU loop over 5 steps") {
  if (skip_without_gpu()) return;
  struct Case {
    const char* name;
    SGDOptions o;
  };
  const std::vector<Case> cases = {
      {"plain", SGDOptions{0.1, 0.0, 0.0, 0.0, false}},
      {"momentum+wd", SGDOptions{0.05, 0.9, 0.0, 1e-2, false}},
      {"dampening", SGDOptions{0.05, 0.8, 0.3, 5e-4, false}},
      {"nesterov+wd", SGDOptions{0.02, 0.9, 0.0, 5e-4, true}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    for (bool fused_gpu : {true, false}) {  // the generic tensor-op path on the GPU agrees too
      CAPTURE(fused_gpu);
      Pair p = make_params();
      SGD cpu_opt(p.cpu, c.o), gpu_opt(p.gpu, c.o);
      gpu_opt.set_fused(fused_gpu);
      for (int s = 0; s < 5; ++s) {
        set_grads(p, s);
        cpu_opt.step();
        gpu_opt.step();
      }
      cuda_backend_or_throw().synchronize(0);
      compare_state(cpu_opt, gpu_opt, p, c.name);
    }
  }
}

TEST_CASE("cuda: fused AdamW kernel matches the fused CPU loop over 5 steps") {
  if (skip_without_gpu()) return;
  for (double wd : {0.0, 1e-2}) {
    CAPTURE(wd);
    for (bool fused_gpu : {true, false}) {
      CAPTURE(fused_gpu);
      Pair p = make_params();
      AdamWOptions o;
      o.lr = 1e-2, o.weight_decay = wd;
      AdamW cpu_opt(p.cpu, o), gpu_opt(p.gpu, o);
      // The same path on both devices: the fused loop computes (1.f - beta2) in f32 (0.999f: 1.29e-5 off
      // 0.001), the generic path in f64, so fused-vs-generic differs by 1.29e-5 in exp_avg_sq whatever
      // the kernels do (found by the CPU mode).
      cpu_opt.set_fused(fused_gpu);
      gpu_opt.set_fused(fused_gpu);
      for (int s = 0; s < 5; ++s) {
        set_grads(p, s);
        cpu_opt.step();
        gpu_opt.step();
      }
      cuda_backend_or_throw().synchronize(0);
      compare_state(cpu_opt, gpu_opt, p, "adamw");
    }
  }
}

TEST_CASE("cuda: the fused GPU step allocates no temporaries") {
  if (skip_without_gpu()) return;
  // The generic path builds d = g + wd*p and friends; the fused kernel works in place. After the
  // first step created the momentum buffers, later fused steps allocate nothing.
  Pair p = make_params();
  SGD opt(p.gpu, SGDOptions{0.05, 0.9, 0.0, 1e-2, true});
  set_grads(p, 0);
  opt.step();
  auto* a = caching_allocator_for(kGpu);
  REQUIRE(a != nullptr);
  const uint64_t allocs = a->stats().num_allocs;
  set_grads(p, 1);  // allocates the gradients (copied from the cpu)
  const uint64_t after_grads = a->stats().num_allocs;
  CHECK(after_grads >= allocs);
  opt.step();
  CHECK(a->stats().num_allocs == after_grads);
}

#else  // neither a CUDA build nor the CPU mode

TEST_CASE("cuda: fused optimizers not built") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
