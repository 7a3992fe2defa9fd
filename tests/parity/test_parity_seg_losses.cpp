// Segmentation losses against PyTorch 1.13, element by element (support/oracle/parity_exact.h):
// per-pixel cross_entropy on (N, K, H, W) (weighted mean = sum w[y] l / sum w[y], ignore_index
// -100 and 255, label smoothing, reduction none/sum, every pixel ignored -> NaN, NaN and inf logits)
// and dice_loss against the same formula written in torch (oracle.py's _dice_loss), forward and
// backward.
#include <doctest/doctest.h>

#include <random>

#include "engine/ops/segmentation.h"
#include "support/oracle/parity_exact.h"

using namespace kiln;
using kiln::test::exact_case;
using kiln::test::ExactCase;
using V = std::vector<Tensor>;

namespace {

const float kNan = NAN, kInf = INFINITY;

Tensor seg_target(int64_t N, int64_t H, int64_t W, int64_t K, int64_t ignore, unsigned seed, int ignore_one_in = 5) {
  std::mt19937 g(seed);
  std::vector<int64_t> v((size_t)(N * H * W));
  for (auto& t : v) t = (ignore_one_in > 0 && g() % (unsigned)ignore_one_in == 0) ? ignore : (int64_t)(g() % (unsigned)K);
  return tensor_from<int64_t>(v, {N, H, W});
}

Tensor rnd_leaf(const Shape& s) {
  NoGradGuard ng;
  return uniform(s, -3, 3, DType::f32).set_requires_grad(true);
}

// logits with NaN / +inf / -inf written at flat positions.
Tensor leaf_with(const Shape& s, const std::vector<std::pair<int64_t, float>>& specials) {
  std::vector<float> v = rnd_leaf(s).to_vector<float>();
  for (auto& [i, x] : specials) v[(size_t)i] = x;
  return tensor_from<float>(v, s).set_requires_grad(true);
}

}  // namespace

TEST_CASE("parity with PyTorch: per-pixel cross_entropy on (N, K, H, W)") {
  manual_seed(41);
  const int64_t N = 2, K = 5, H = 6, W = 7;
  const Shape xs{N, K, H, W};
  std::vector<ExactCase> cs;
  Tensor w = uniform({K}, 0.25, 3.0, DType::f32);
  for (int64_t ign : {int64_t(255), int64_t(-100)}) {
    Tensor t = seg_target(N, H, W, K, ign, (unsigned)(ign + 1000));
    const std::string tag = " ignore " + std::to_string(ign);
    for (const char* red : {"mean", "sum", "none"}) {
      const Reduction r = std::string(red) == "mean" ? Reduction::mean
                          : std::string(red) == "sum" ? Reduction::sum
                                                      : Reduction::none;
      cs.push_back(exact_case(std::string("ce weighted ") + red + tag, "cross_entropy", {rnd_leaf(xs)},
                              {{"reduction", red}, {"ignore_index", ign}},
                              [t, w, r, ign](const V& x) { return V{cross_entropy(x[0], t, w, r, ign)}; },
                              {test::to_host(t), test::to_host(w)}));
    }
    cs.push_back(exact_case("ce unweighted mean" + tag, "cross_entropy", {rnd_leaf(xs)}, {{"ignore_index", ign}},
                            [t, ign](const V& x) { return V{cross_entropy(x[0], t, Tensor(), Reduction::mean, ign)}; },
                            {test::to_host(t)}));
    cs.push_back(exact_case("ce weighted smoothed mean" + tag, "cross_entropy", {rnd_leaf(xs)},
                            {{"ignore_index", ign}, {"label_smoothing", 0.1}},
                            [t, w, ign](const V& x) { return V{cross_entropy(x[0], t, w, Reduction::mean, ign, 0.1)}; },
                            {test::to_host(t), test::to_host(w)}));
  }
  {
    // Every pixel ignored: mean is 0 / 0 = NaN in torch, the gradient is 0.
    Tensor t = full({N, H, W}, 255, DType::i64);
    cs.push_back(exact_case("ce all ignored mean", "cross_entropy", {rnd_leaf(xs)}, {{"ignore_index", 255}},
                            [t, w](const V& x) { return V{cross_entropy(x[0], t, w, Reduction::mean, 255)}; },
                            {test::to_host(t), test::to_host(w)}));
    cs.push_back(exact_case("ce all ignored sum", "cross_entropy", {rnd_leaf(xs)},
                            {{"ignore_index", 255}, {"reduction", "sum"}},
                            [t](const V& x) { return V{cross_entropy(x[0], t, Tensor(), Reduction::sum, 255)}; },
                            {test::to_host(t)}));
  }
  {
    // NaN / inf logits: in a valid pixel, and in an ignored pixel (which torch leaves out of the loss).
    Tensor t = seg_target(N, H, W, K, 255, 77, 0);
    std::vector<int64_t> tv = t.to_vector<int64_t>();
    tv[3] = 255;  // pixel (0, 0, 3) ignored
    t = tensor_from<int64_t>(tv, {N, H, W});
    const int64_t HW = H * W;
    // (n 0, k 1, pixel 3): ignored pixel; (n 1, k 2, pixel 10): valid; (n 0, k 0, pixel 20): +inf;
    // (n 1, k 4, pixel 5): -inf.
    Tensor x = leaf_with(xs, {{1 * HW + 3, kNan}, {(1 * K + 2) * HW + 10, kNan}, {20, kInf}, {(1 * K + 4) * HW + 5, -kInf}});
    Tensor x2 = leaf_with(xs, {{1 * HW + 3, kNan}, {(1 * K + 4) * HW + 5, -kInf}});
    for (const char* red : {"none", "mean"}) {
      const Reduction r = std::string(red) == "mean" ? Reduction::mean : Reduction::none;
      cs.push_back(exact_case(std::string("ce NaN/inf logits ") + red, "cross_entropy",
                              {clone(x).detach().set_requires_grad(true)}, {{"ignore_index", 255}, {"reduction", red}},
                              [t, w, r](const V& v) { return V{cross_entropy(v[0], t, w, r, 255)}; },
                              {test::to_host(t), test::to_host(w)}));
    }
    cs.push_back(exact_case("ce NaN in an ignored pixel only, -inf elsewhere: finite mean", "cross_entropy",
                            {x2}, {{"ignore_index", 255}},
                            [t, w](const V& v) { return V{cross_entropy(v[0], t, w, Reduction::mean, 255)}; },
                            {test::to_host(t), test::to_host(w)}));
  }
  int n = kiln::test::run_exact_cases(cs, "seg_ce");
  MESSAGE("per-pixel cross_entropy parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("parity with PyTorch: dice_loss against the formula in torch") {
  manual_seed(42);
  const int64_t N = 2, K = 4, H = 5, W = 6;
  const Shape xs{N, K, H, W};
  std::vector<ExactCase> cs;
  Tensor t = seg_target(N, H, W, K, 255, 5);
  cs.push_back(exact_case("dice", "dice_loss", {rnd_leaf(xs)}, {},
                          [t](const V& x) { return V{dice_loss(x[0], t)}; }, {test::to_host(t)}));
  cs.push_back(exact_case("dice without background", "dice_loss", {rnd_leaf(xs)}, {{"include_background", false}},
                          [t](const V& x) { return V{dice_loss(x[0], t, 255, 1.0, false)}; }, {test::to_host(t)}));
  cs.push_back(exact_case("dice smooth 0.25", "dice_loss", {rnd_leaf(xs)}, {{"smooth", 0.25}},
                          [t](const V& x) { return V{dice_loss(x[0], t, 255, 0.25)}; }, {test::to_host(t)}));
  Tensor t100 = seg_target(N, H, W, K, -100, 6);
  cs.push_back(exact_case("dice ignore -100", "dice_loss", {rnd_leaf(xs)}, {{"ignore_index", -100}},
                          [t100](const V& x) { return V{dice_loss(x[0], t100, -100)}; }, {test::to_host(t100)}));
  {
    // A class absent from the target (class 3 never appears): its dice is smooth / (sum p + smooth).
    Tensor t3 = seg_target(N, H, W, 3, 255, 8);
    cs.push_back(exact_case("dice, a class absent from the target", "dice_loss", {rnd_leaf(xs)}, {},
                            [t3](const V& x) { return V{dice_loss(x[0], t3)}; }, {test::to_host(t3)}));
    Tensor all = full({N, H, W}, 255, DType::i64);
    cs.push_back(exact_case("dice, every pixel ignored (loss 0)", "dice_loss", {rnd_leaf(xs)}, {},
                            [all](const V& x) { return V{dice_loss(x[0], all)}; }, {test::to_host(all)}));
  }
  {
    // NaN in a valid pixel: loss NaN. NaN / inf in an ignored pixel only: finite loss.
    std::vector<int64_t> tv = t.to_vector<int64_t>();
    tv[0] = 255;
    tv[1] = 2;
    Tensor tt = tensor_from<int64_t>(tv, {N, H, W});
    Tensor xa = leaf_with(xs, {{1, kNan}});              // pixel 1 (valid)
    Tensor xb = leaf_with(xs, {{0, kNan}, {H * W, kInf}});  // pixel 0 (ignored), classes 0 and 1
    Tensor xc = leaf_with(xs, {{1, kInf}});              // +inf in a valid pixel: softmax NaN -> NaN
    cs.push_back(exact_case("dice NaN in a valid pixel", "dice_loss", {xa}, {},
                            [tt](const V& x) { return V{dice_loss(x[0], tt)}; }, {test::to_host(tt)}));
    cs.push_back(exact_case("dice NaN/inf in an ignored pixel", "dice_loss", {xb}, {},
                            [tt](const V& x) { return V{dice_loss(x[0], tt)}; }, {test::to_host(tt)}));
    cs.push_back(exact_case("dice +inf in a valid pixel", "dice_loss", {xc}, {},
                            [tt](const V& x) { return V{dice_loss(x[0], tt)}; }, {test::to_host(tt)}));
  }
  int n = kiln::test::run_exact_cases(cs, "seg_dice");
  MESSAGE("dice_loss parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}
