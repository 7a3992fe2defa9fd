// Gradients of the segmentation losses by f64 central differences on non-contiguous (N, K, H, W)
// logits: per-pixel cross_entropy (class weights, ignore_index -100 and 255, label smoothing, every
// reduction) and dice_loss (ignore_index, with and without the background class).
#include <random>

#include "engine/ops/segmentation.h"
#include "support/gradcheck.h"

using namespace kiln;
using kiln::test::gradcheck;
using kiln::test::random_input;

namespace {

// (N, H, W) class indices in [0, K), about one pixel in five set to `ignore`.
Tensor seg_target(int64_t N, int64_t H, int64_t W, int64_t K, int64_t ignore, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v((size_t)(N * H * W));
  for (auto& t : v) t = (g() % 5 == 0) ? ignore : (int64_t)(g() % (unsigned)K);
  return tensor_from<int64_t>(v, {N, H, W});
}

}  // namespace

TEST_CASE("gradcheck: per-pixel cross_entropy on (N, K, H, W)") {
  manual_seed(31);
  const int64_t N = 2, K = 4, H = 3, W = 5;
  Tensor weight = uniform({K}, 0.5, 2.0, DType::f64);
  for (int64_t ign : {int64_t(-100), int64_t(255)}) {
    Tensor t = seg_target(N, H, W, K, ign, 7);
    for (bool nc : {false, true}) {
      Tensor x = random_input({N, K, H, W}, nc, -2, 2);
      CAPTURE(ign);
      CAPTURE(nc);
      CHECK(gradcheck("ce mean weighted", [&](auto& v) { return cross_entropy(v[0], t, weight, Reduction::mean, ign); },
                      {x}) <= 1e-6);
      CHECK(gradcheck("ce none", [&](auto& v) { return cross_entropy(v[0], t, weight, Reduction::none, ign); }, {x}) <=
            1e-6);
      CHECK(gradcheck("ce sum smoothed", [&](auto& v) {
        return cross_entropy(v[0], t, weight, Reduction::sum, ign, 0.1);
      }, {x}) <= 1e-6);
      CHECK(gradcheck("ce mean unweighted smoothed", [&](auto& v) {
        return cross_entropy(v[0], t, Tensor(), Reduction::mean, ign, 0.2);
      }, {x}) <= 1e-6);
    }
  }
  // (N, K, L): one spatial dim.
  Tensor x1 = random_input({3, 3, 4}, true);
  Tensor t1 = tensor_from<int64_t>({0, 2, 255, 1, 1, 1, 0, 2, 255, 255, 0, 2}, {3, 4});
  CHECK(gradcheck("ce (N, K, L)", [&](auto& v) { return cross_entropy(v[0], t1, Tensor(), Reduction::mean, 255); },
                  {x1}) <= 1e-6);
}

TEST_CASE("gradcheck: dice_loss") {
  manual_seed(32);
  const int64_t N = 2, K = 3, H = 4, W = 5;
  Tensor t = seg_target(N, H, W, K, 255, 9);
  for (bool nc : {false, true}) {
    Tensor x = random_input({N, K, H, W}, nc, -2, 2);
    CAPTURE(nc);
    CHECK(gradcheck("dice", [&](auto& v) { return dice_loss(v[0], t); }, {x}) <= 1e-6);
    CHECK(gradcheck("dice no background", [&](auto& v) { return dice_loss(v[0], t, 255, 1.0, false); }, {x}) <= 1e-6);
    CHECK(gradcheck("dice smooth 0.5, ignore -100", [&](auto& v) {
      Tensor t2 = seg_target(N, H, W, K, -100, 10);
      return dice_loss(v[0], t2, -100, 0.5);
    }, {x}) <= 1e-6);
  }
}
