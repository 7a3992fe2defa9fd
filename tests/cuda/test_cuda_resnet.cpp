// A full ResNet18 training step on the GPU against the same step on the CPU: identical initial
// weights (the CPU model's state copied), identical input (4 x 3 x 64 x 64, 10 classes), train-mode
// forward, cross-entropy, backward and one SGD step (momentum 0.9, weight decay 5e-4) in f32 with
// TF32 off. Compared: logits, loss, every parameter gradient, every parameter and BN buffer after
// the step. Without a GPU it prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "models/resnet.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;
using kiln_test::skip_without_gpu;
using kiln_test::kGpu;

namespace {

// Why 1e-4 and not the 1e-5 of single ops: the two devices sum every convolution and GEMM in a
// different order (cuDNN / cuBLAS tiling vs kiln's im2col + OpenBLAS), an O(sqrt(K) * 2^-24)
// relative difference per layer with K up to 512 * 3 * 3. Twenty layers in series, each followed
// by a train-mode batch norm whose backward divides by a batch standard deviation measured over as
// few as 4 x 2 x 2 values, grow that to about 1e-5 at the logits and a few 1e-5 in the deepest
// gradients. 1e-4 leaves headroom and is the bound for conv and matmul with TF32 off; the
// CPU-vs-PyTorch parity test of the same model uses the same bound for the same reason.
constexpr double kTol = 1e-4;

std::vector<double> host_values(const Tensor& t) {
  return to_device(t.detach(), Device::cpu()).to_vector<double>();
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |cpu - gpu| / scale, scale = max |cpu| unless given.
double rel_err(const Tensor& cpu, const Tensor& gpu, double scale = -1) {
  std::vector<double> a = host_values(cpu), b = host_values(gpu);
  REQUIRE(a.size() == b.size());
  double num = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num = std::max(num, std::fabs(a[i] - b[i]));
  }
  if (scale < 0) scale = max_abs(a);
  return num / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("cuda: one ResNet18 training step (4x3x64x64, SGD momentum) matches the CPU") {
  if (skip_without_gpu()) return;
  const bool tf32_before = cuda::allow_tf32();
  cuda::set_allow_tf32(false);  // true f32 GEMMs and convolutions on the GPU

  manual_seed(2024);
  auto cpu_m = models::resnet18(10, 3, false);
  auto gpu_m = models::resnet18(10, 3, false);
  gpu_m->load_state_dict(cpu_m->state_dict());  // same initial weights and buffers
  gpu_m->to(kGpu);
  cpu_m->train();
  gpu_m->train();
  for (auto& [name, p] : gpu_m->named_parameters()) REQUIRE_MESSAGE(p.device().is_cuda(), name, " stayed on ", p.device().str());

  Tensor x = normal({4, 3, 64, 64}, 0.0, 1.0);
  Tensor y = tensor_from<int64_t>({3, 7, 0, 9}, {4});
  Tensor xg = to_device(x, kGpu), yg = to_device(y, kGpu);

  optim::SGDOptions o;
  o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 5e-4;
  optim::SGD cpu_opt(cpu_m->named_parameters(), o), gpu_opt(gpu_m->named_parameters(), o);
  cpu_opt.zero_grad();
  gpu_opt.zero_grad();

  Tensor logits_c = (*cpu_m)(x), logits_g = (*gpu_m)(xg);
  Tensor loss_c = cross_entropy(logits_c, y), loss_g = cross_entropy(logits_g, yg);
  {
    const double e = rel_err(logits_c, logits_g);
    INFO("logits: relative error " << e);
    CHECK(e <= kTol);
    const double lc = loss_c.item(), lg = to_device(loss_g, Device::cpu()).item();
    INFO("loss cpu " << lc << " gpu " << lg);
    CHECK(std::fabs(lc - lg) <= kTol * std::fabs(lc));
  }
  loss_c.backward();
  loss_g.backward();
  cuda::synchronize(0);

  // Gradients. A parameter whose whole gradient is zero up to roundoff (its effect cancelled by a
  // train-mode batch norm, say) is all noise: it is compared on the model's gradient scale.
  auto pc = cpu_m->named_parameters(), pg = gpu_m->named_parameters();
  REQUIRE(pc.size() == pg.size());
  double global = 0;
  for (auto& [n, p] : pc) global = std::max(global, max_abs(host_values(p.grad())));
  REQUIRE(global > 0);
  int compared = 0;
  for (size_t i = 0; i < pc.size(); ++i) {
    CAPTURE(pc[i].first);
    REQUIRE(pc[i].first == pg[i].first);
    REQUIRE_MESSAGE(pg[i].second.grad().defined(), pg[i].first, " got no gradient on the GPU");
    REQUIRE(pg[i].second.grad().device().is_cuda());
    const double own = max_abs(host_values(pc[i].second.grad()));
    const bool noise = own < 1e-5 * global;
    const double e = rel_err(pc[i].second.grad(), pg[i].second.grad(), noise ? global : -1);
    INFO("grad " << pc[i].first << (noise ? " (zero up to roundoff: on the model scale)" : "") << ": relative error "
                 << e << " (max |grad| " << own << ", model " << global << ")");
    CHECK(e <= (noise ? kTol * 1e-2 : kTol));
    ++compared;
  }
  CHECK(compared == 62);  // resnet18: 20 convs + 20 BN (weight, bias) + fc (weight, bias)

  cpu_opt.step();
  gpu_opt.step();
  cuda::synchronize(0);

  // Parameters, BN running statistics and num_batches_tracked after the step.
  auto sc = cpu_m->state_dict(), sg = gpu_m->state_dict();
  REQUIRE(sc.size() == sg.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    CAPTURE(sc[i].first);
    REQUIRE(sc[i].first == sg[i].first);
    const double e = rel_err(sc[i].second, sg[i].second);
    INFO("after SGD " << sc[i].first << ": relative error " << e);
    CHECK(e <= kTol);
  }
  cuda::set_allow_tf32(tf32_before);
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: resnet18 step not built") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
