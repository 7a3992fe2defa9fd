// Segmentation losses: shapes and errors of per-pixel cross_entropy, dice_loss and one_hot (bad
// targets name the op, the value and the shape), and both losses on the meta device (shape only,
// forward and backward) so the memory predictor can run a segmentation step.
#include <doctest/doctest.h>

#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"

using namespace kiln;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("one_hot: (N, H, W) -> (N, K, H, W), ignored pixels all zero") {
  Tensor t = tensor_from<int64_t>({0, 2, 255, 1}, {1, 2, 2});
  Tensor oh = one_hot(t, 3, 255);
  CHECK(oh.sizes() == Shape{1, 3, 2, 2});
  CHECK(oh.to_vector<float>() == std::vector<float>{1, 0, 0, 0, /*k1*/ 0, 0, 0, 1, /*k2*/ 0, 1, 0, 0});
}

TEST_CASE("segmentation losses: out-of-range targets and bad shapes are clear errors") {
  Tensor x = uniform({2, 3, 4, 4}, -1, 1);
  Tensor t = zeros({2, 4, 4}, DType::i64);
  std::vector<int64_t> bad(32, 1);
  bad[21] = 7;  // n 1, pixel 5
  Tensor tb = tensor_from<int64_t>(bad, {2, 4, 4});
  std::string e = error_of([&] { dice_loss(x, tb); });
  CHECK(e.find("one_hot") != std::string::npos);
  CHECK(e.find("target value 7") != std::string::npos);
  CHECK(e.find("i64 (2, 4, 4)") != std::string::npos);
  CHECK(e.find("K=3") != std::string::npos);
  // 255 is not ignored when ignore_index is -100.
  bad[21] = 255;
  Tensor t255 = tensor_from<int64_t>(bad, {2, 4, 4});
  CHECK(error_of([&] { dice_loss(x, t255, -100); }).find("target value 255") != std::string::npos);
  CHECK(error_of([&] { cross_entropy(x, t255); }).find("target 255") != std::string::npos);
  CHECK(error_of([&] { cross_entropy(x, t255, Tensor(), Reduction::mean, 255); }).empty());
  bad[21] = -1;
  Tensor tneg = tensor_from<int64_t>(bad, {2, 4, 4});
  CHECK(error_of([&] { cross_entropy(x, tneg, Tensor(), Reduction::mean, 255); }).find("target -1") != std::string::npos);
  // Shapes.
  CHECK(error_of([&] { cross_entropy(x, zeros({2, 4, 5}, DType::i64)); }).find("cross_entropy: target") !=
        std::string::npos);
  CHECK(error_of([&] { dice_loss(x, zeros({2, 4, 5}, DType::i64)); }).find("dice_loss: target") != std::string::npos);
  CHECK(error_of([&] { dice_loss(x, zeros({2, 4, 4}, DType::f32)); }).find("dice_loss: target") != std::string::npos);
  CHECK(error_of([&] { dice_loss(uniform({2, 3}, -1, 1), zeros({2}, DType::i64)); }).find("(N, K, d...)") !=
        std::string::npos);
  CHECK(error_of([&] { dice_loss(uniform({2, 1, 4, 4}, -1, 1), t, 255, 1.0, false); }).find("K >= 2") !=
        std::string::npos);
  // Reduction none keeps the target's shape.
  CHECK(cross_entropy(x, t, Tensor(), Reduction::none).sizes() == Shape{2, 4, 4});
}

TEST_CASE("dice_loss: a perfect prediction gives a loss near 0, a wrong one near 1") {
  Tensor t = tensor_from<int64_t>({0, 1, 1, 0, 2, 2, 255, 0}, {2, 2, 2});
  Tensor good = mul(to_dtype(one_hot(t, 3, 255), DType::f32), 40.0);  // ignored pixel: uniform softmax
  Tensor wrong = mul(to_dtype(one_hot(t, 3, 255), DType::f32), -40.0);
  // Perfect: p_k = t_k on the 7 valid pixels, dice_k = (2 n_k + 1) / (2 n_k + 1) = 1.
  CHECK(dice_loss(good, t).item() == doctest::Approx(0.0).epsilon(1e-5));
  // Wrong everywhere: p = 0 on the target class and 1/2 on the two others, so sum p_k = (7 - n_k) / 2
  // (n = 3, 2, 2 valid pixels of classes 0, 1, 2), no overlap: dice_k = 1 / (sum p_k + n_k + 1).
  const double d0 = 1.0 / (2.0 + 3 + 1), d1 = 1.0 / (2.5 + 2 + 1), d2 = d1;
  CHECK(dice_loss(wrong, t).item() == doctest::Approx(1.0 - (d0 + d1 + d2) / 3).epsilon(1e-5));
}

TEST_CASE("segmentation losses on meta: shapes forward and backward") {
  Tensor x = empty({2, 3, 8, 8}, DType::f32, Device::meta()).set_requires_grad(true);
  Tensor t = empty({2, 8, 8}, DType::i64, Device::meta());
  Tensor l = add(cross_entropy(x, t, Tensor(), Reduction::mean, 255), dice_loss(x, t));
  CHECK(l.sizes() == Shape{});
  CHECK(l.device().is_meta());
  l.backward(empty({}, DType::f32, Device::meta()));
  CHECK(x.grad().sizes() == Shape{2, 3, 8, 8});
  CHECK(cross_entropy(x, t, Tensor(), Reduction::none).sizes() == Shape{2, 8, 8});
}
