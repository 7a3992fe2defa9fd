// The loss scaler and a whole --amp training step on the GPU against the CPU: found-inf must be 0
// for clean gradients (all positive, all ones: the rows where the old reduce.cu argmin read
// p[INT64_MAX]) and 1 for a gradient with one inf or NaN; the step must then be skipped and the
// scale halved. A resnet18_small --amp step (f16 autocast, loss scaling, SGD momentum) from the same
// weights must match the CPU's step and read back from the device at most once (kiln's own sync
// counter, engine/core/host_sync.h), and an out-of-range target must be reported at that sync,
// naming the op. Without a GPU each test prints "cuda tests skipped: <reason>" and passes.
// Never ran on a GPU so far.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/core/host_sync.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "models/registry.h"

#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "support/cuda_test.h"
#include "kernels/common/cuda_backend.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

// found_inf after unscale_ of one parameter whose gradient is g (made by backward of sum(p * g)).
double found_inf_for(const std::vector<double>& g) {
  optim::LossScaler scaler({}, kGpu);
  const int64_t n = (int64_t)g.size();
  Tensor p = to_device(zeros({n}), kGpu).set_requires_grad(true);
  Tensor gg = to_device(tensor_from(std::vector<float>(g.begin(), g.end()), {n}), kGpu);
  scaler.scale(sum(mul(p, gg))).backward();
  scaler.unscale_({p});
  return back(scaler.found_inf_tensor()).item();
}

double rel_err(const Tensor& cpu, const Tensor& gpu) {
  const std::vector<double> a = to_device(cpu.detach(), Device::cpu()).to_vector<double>();
  const std::vector<double> b = back(gpu).to_vector<double>();
  REQUIRE(a.size() == b.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(a[i]));
  }
  return num / den;
}

}  // namespace

TEST_CASE("cuda: loss scaler found-inf is 0 on clean gradients and 1 with one inf or NaN") {
  if (skip_without_gpu()) return;
  for (size_t n : {1u, 31u, 4096u, 4097u, 100000u}) {
    CAPTURE(n);
    CHECK(found_inf_for(std::vector<double>(n, 1.0)) == 0.0);   // all ones
    CHECK(found_inf_for(std::vector<double>(n, 0.25)) == 0.0);  // all positive
    CHECK(found_inf_for(std::vector<double>(n, -2.0)) == 0.0);  // all negative
    for (double bad : {(double)INFINITY, -(double)INFINITY, std::nan("")}) {
      std::vector<double> g(n, 1.0);
      g[n / 2] = bad;
      CHECK(found_inf_for(g) == 1.0);
    }
  }
  // step() skips on inf and halves the scale; runs on clean gradients.
  optim::LossScaler scaler({}, kGpu);
  Tensor p = to_device(zeros({5}), kGpu).set_requires_grad(true);
  bool ran = true;
  scaler.scale(sum(mul(p, to_device(tensor_from(std::vector<float>{1, 2, INFINITY, 4, 5}, {5}), kGpu)))).backward();
  ran = scaler.step({p}, [] {});
  scaler.update();
  CHECK(!ran);
  CHECK(scaler.current_scale() == 32768.0);
  CHECK(back(scaler.scale_tensor()).item() == 32768.0);
  p.set_grad(Tensor());
  scaler.scale(sum(mul(p, to_device(full({5}, 1.0), kGpu)))).backward();
  ran = scaler.step({p}, [] {});
  scaler.update();
  CHECK(ran);
}

TEST_CASE("cuda: one resnet18_small --amp step matches the CPU and syncs at most once") {
  if (skip_without_gpu()) return;
  if (kiln_test::cpu_mode()) {  // 98 s there (every mma emulated); the CPU mode's whole step is test_cuda_cpu_step
    MESSAGE("cuda tests skipped in the CPU mode: resnet18_small takes 98 s; tests/cuda_cpu/test_cuda_cpu_step.cpp runs small_cnn");
    return;
  }
  manual_seed(15);
  auto cm = models::make_model("resnet18_small", 10, 3, 16), gm = models::make_model("resnet18_small", 10, 3, 16);
  gm->load_state_dict(cm->state_dict());
  gm->to(kGpu);
  cm->train();
  gm->train();
  optim::SGDOptions o;
  o.lr = 0.05, o.momentum = 0.9;
  optim::SGD copt(cm->named_parameters(), o), gopt(gm->named_parameters(), o);
  optim::LossScaler cs({}, Device::cpu()), gs({}, kGpu);
  Tensor x = normal({4, 3, 16, 16}, 0.0, 1.0);
  Tensor y = tensor_from<int64_t>({3, 7, 0, 9}, {4});
  Tensor xg = to_device(x, kGpu), yg = to_device(y, kGpu);
  cuda_backend_or_throw().synchronize(0);

  auto step = [](nn::Module& m, optim::SGD& opt, optim::LossScaler& sc, const Tensor& xx, const Tensor& yy) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard ac(true, DType::f16);
      loss = cross_entropy(m(xx), yy);
    }
    sc.scale(loss).backward();
    const bool ran = sc.step(opt);
    sc.update();
    return std::make_pair(loss, ran);
  };
  auto [lc, rc] = step(*cm, copt, cs, x, y);
  HostSyncScope syncs;
  auto [lg, rg] = step(*gm, gopt, gs, xg, yg);
  const HostSyncCounts k = syncs.counts();
  INFO("device syncs in the GPU step: " << k.device_syncs << ", host reads: " << k.host_reads);
  CHECK(k.device_syncs <= 1);
  CHECK(rc == rg);
  CHECK(cs.current_scale() == gs.current_scale());
  // f16 autocast on both sides, different summation orders (cuDNN / cuBLAS vs im2col + OpenBLAS):
  // a few f16 ulps through 20 layers.
  CHECK(rel_err(lc, lg) <= 2e-2);
  auto sc = cm->state_dict(), sg = gm->state_dict();
  REQUIRE(sc.size() == sg.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    CAPTURE(sc[i].first);
    CHECK(rel_err(sc[i].second, sg[i].second) <= 2e-2);
  }
}

TEST_CASE("cuda: an out-of-range target is reported at the next sync, naming the op") {
  if (skip_without_gpu()) return;
  Tensor logits = to_device(uniform({4, 5}, -1, 1), kGpu);
  Tensor y = to_device(tensor_from<int64_t>({0, 7, 1, 2}, {4}), kGpu);
  Tensor loss = cross_entropy(logits, y);  // queued: no sync, no throw yet
  std::string msg;
  try {
    (void)back(loss);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("cross_entropy_forward") != std::string::npos);
  CHECK(msg.find("target 7 at position 1") != std::string::npos);
  // the loss itself is NaN, never a plausible number, and the next copy is clean again
  CHECK(std::isnan(back(loss).item()));
}

#else  // neither a CUDA build nor the CPU mode

TEST_CASE("cuda: loss scaler and --amp step (backend not built)") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
