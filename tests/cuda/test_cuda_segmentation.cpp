// CUDA segmentation ops against the CPU backend: per-pixel cross_entropy on (N, K, H, W) with class
// weights and ignore_index 255 (many pixels, so the per-block partial sums of loss.cu span many
// blocks), one_hot, dice_loss, forward and backward; an out-of-range class in one_hot is reported at
// the next synchronization naming the op, the value and K; a UNet training step (unet_small) on the
// GPU against the CPU. f32 error max|a - b| / max|a| <= 1e-5 (ops), 1e-4 (the UNet step). Without a
// GPU each test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"

#if defined(KILN_WITH_CUDA)
#include "models/registry.h"
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
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

Tensor seg_targets(int64_t N, int64_t H, int64_t W, int64_t K, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v((size_t)(N * H * W));
  for (auto& t : v) t = g() % 7 == 0 ? 255 : (int64_t)(g() % (uint32_t)K);
  return tensor_from<int64_t>(v, {N, H, W});
}

// loss_fn on cpu and gpu copies of the logits: the value and the logits' gradient.
void check_loss(const std::string& what, const std::function<Tensor(const Tensor&, const Tensor&)>& loss_fn,
                const Tensor& logits, const Tensor& target, double tol) {
  Tensor a = clone(logits).detach().set_requires_grad(true);
  Tensor b = to_device(logits.detach(), kGpu).set_requires_grad(true);
  Tensor la = loss_fn(a, target), lb = loss_fn(b, to_device(target, kGpu));
  INFO(what);
  CHECK(rel_err(la.detach(), back(lb.detach())) <= tol);
  Tensor seed = uniform(la.sizes(), 0.5, 1.5);
  sum(mul(la, seed)).backward();
  sum(mul(lb, to_device(seed, kGpu))).backward();
  CHECK(rel_err(a.grad(), back(b.grad())) <= tol);
}

}  // namespace

TEST_CASE("cuda: per-pixel cross_entropy, one_hot and dice_loss against the CPU") {
  if (skip_without_gpu()) return;
  manual_seed(3);
  const int64_t N = 2, K = 5, H = 96, W = 80;  // 15360 pixels: many blocks of partial sums
  Tensor logits = uniform({N, K, H, W}, -3, 3), w = uniform({K}, 0.25, 2.0);
  Tensor t = seg_targets(N, H, W, K, 7);
  Tensor wg = to_device(w, kGpu);
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    check_loss("cross_entropy weighted, ignore 255, reduction " + std::to_string((int)r),
               [&](const Tensor& x, const Tensor& y) {
                 return cross_entropy(x, y, x.device().is_cuda() ? wg : w, r, 255, 0.1);
               },
               logits, t, 1e-5);
  }
  Tensor oh = one_hot(t, K, 255), ohg = one_hot(to_device(t, kGpu), K, 255);
  CHECK(rel_err(oh, back(ohg)) == 0);
  check_loss("dice_loss", [](const Tensor& x, const Tensor& y) { return dice_loss(x, y); }, logits, t, 1e-5);
  check_loss("dice_loss without background",
             [](const Tensor& x, const Tensor& y) { return dice_loss(x, y, 255, 1.0, false); }, logits, t, 1e-5);
}

TEST_CASE("cuda: one_hot reports an out-of-range class at the next synchronization") {
  if (skip_without_gpu()) return;
  std::vector<int64_t> v(32, 1);
  v[13] = 9;
  Tensor tg = to_device(tensor_from<int64_t>(v, {2, 4, 4}), kGpu);
  std::string msg;
  try {
    Tensor oh = one_hot(tg, 3, 255);
    back(oh);  // the host read synchronizes and reports
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  CHECK(msg.find("one_hot") != std::string::npos);
  CHECK(msg.find("target 9 at position 13") != std::string::npos);
  CHECK(msg.find("K=3") != std::string::npos);
}

TEST_CASE("cuda: a unet_small forward and backward on the GPU against the CPU") {
  if (skip_without_gpu()) return;
  manual_seed(4);
  auto mc = models::make_model("unet_small:depth=3", 3, 3, 64);
  auto mg = models::make_model("unet_small:depth=3", 3, 3, 64);
  mg->load_state_dict(mc->state_dict());
  mg->to(kGpu);
  Tensor x = uniform({2, 3, 64, 64}, -1, 1), t = seg_targets(2, 64, 64, 3, 9);
  auto loss = [](nn::Module& m, const Tensor& in, const Tensor& y) {
    Tensor logits = m(in);
    return add(cross_entropy(logits, y, Tensor(), Reduction::mean, 255), dice_loss(logits, y));
  };
  Tensor lc = loss(*mc, x, t), lg = loss(*mg, to_device(x, kGpu), to_device(t, kGpu));
  CHECK(rel_err(lc.detach(), back(lg.detach())) <= 1e-4);
  lc.backward();
  lg.backward();
  auto pc = mc->named_parameters(), pg = mg->named_parameters();
  REQUIRE(pc.size() == pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(rel_err(pc[i].second.grad(), back(pg[i].second.grad())) <= 1e-4);
  }
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: segmentation ops not built") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
