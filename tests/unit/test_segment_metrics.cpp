// Segmentation metrics: the confusion-matrix op on hand-made outputs (ignore pixels, the argmax tie
// rule, NaN, non-contiguous and 16-bit scores, bad targets), the metric definitions of
// engine/train/segment_metrics.h on hand-made matrices (the absent-class rule, --ignore-background,
// Dice smoothing), and evaluate_segmentation over a whole set (not a mean of per-batch values).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/mask_array_source.h"
#include "engine/core/error.h"
#include "engine/nn/module.h"
#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"
#include "engine/train/segment_metrics.h"
#include "engine/train/model_card.h"
#include "engine/train/segment_task.h"

using namespace kiln;

namespace {

// The model that returns its input: the scores are the batch's x, so predictions are hand-made.
class PassThrough : public nn::Module {
 public:
  PassThrough() : nn::Module("PassThrough") {}
  Tensor forward(const Tensor& x) override { return x; }
};

std::vector<int64_t> read_counts(const Tensor& c) { return to_device(c, Device::cpu()).to_vector<int64_t>(); }

}  // namespace

TEST_CASE("confusion_matrix: hand-made 3-class output with ignored pixels") {
  // scores (1, 3, 2, 3): per pixel the class with the clear maximum (margins of 1 or more).
  // pixel:      0  1  2  3  4  5
  // predicted:  0  1  2  1  0  2
  // target:     0  1  1  255 2 2
  const std::vector<float> s = {
      5, 0, 0, 0, 5, 0,   // class 0 scores
      0, 5, 1, 6, 1, 0,   // class 1
      1, 0, 7, 0, 0, 3};  // class 2
  Tensor scores = tensor_from(s, {1, 3, 2, 3});
  Tensor target = tensor_from(std::vector<int64_t>{0, 1, 1, 255, 2, 2}, {1, 2, 3});
  const std::vector<int64_t> c = read_counts(confusion_matrix(scores, target));
  // rows = target, columns = predicted
  CHECK(c == std::vector<int64_t>{1, 0, 0,    // target 0: predicted 0
                                  0, 1, 1,    // target 1: predicted 1, 2
                                  1, 0, 1});  // target 2: predicted 0, 2 (pixel 3 ignored)
  // Accumulating adds; a second call doubles every count.
  Tensor acc = zeros({3, 3}, DType::i64);
  confusion_matrix_add_(acc, scores, target);
  confusion_matrix_add_(acc, scores, target);
  std::vector<int64_t> twice = c;
  for (auto& v : twice) v *= 2;
  CHECK(read_counts(acc) == twice);
  // Another ignore index: 255 is then a bad target.
  CHECK_THROWS_WITH_AS(confusion_matrix(scores, target, -100), doctest::Contains("target 255 at image 0, pixel 3"),
                       Error);
}

TEST_CASE("confusion_matrix: ties go to the first maximum and NaN wins, like argmax") {
  // Four pixels of 3 classes: [1,5,5] -> 1, [5,5,5] -> 0, [1,NaN,NaN] -> 1, [2,1,3] -> 2.
  const float nan = std::nanf("");
  const std::vector<float> s = {1, 5, 1, 2,  //
                                5, 5, nan, 1,  //
                                5, 5, nan, 3};
  Tensor scores = tensor_from(s, {1, 3, 1, 4});
  Tensor target = tensor_from(std::vector<int64_t>{0, 0, 0, 0}, {1, 1, 4});
  const std::vector<int64_t> c = read_counts(confusion_matrix(scores, target));
  CHECK(c == std::vector<int64_t>{1, 2, 1, 0, 0, 0, 0, 0, 0});  // predicted 0 once, 1 twice, 2 once
  // The same rule as the argmax op the training metric uses.
  CHECK(to_device(argmax(scores, 1), Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 2});
}

TEST_CASE("confusion_matrix: non-contiguous, f64, f16 and (N, K) inputs, shape errors") {
  // Scores built as (N, H, W, K) and permuted to (N, K, H, W): a non-contiguous view.
  const std::vector<float> nhwc = {9, 0, 0, 0, 9, 0, 0, 0, 9, 0, 9, 0};  // pixels predict 0, 1, 2, 1
  Tensor scores = permute(tensor_from(nhwc, {1, 2, 2, 3}), {0, 3, 1, 2});
  REQUIRE_FALSE(scores.is_contiguous());
  Tensor target = tensor_from(std::vector<int64_t>{0, 1, 1, 2}, {1, 2, 2});
  const std::vector<int64_t> want = {1, 0, 0, 0, 1, 1, 0, 1, 0};
  CHECK(read_counts(confusion_matrix(scores, target)) == want);
  CHECK(read_counts(confusion_matrix(to_dtype(scores, DType::f64), target)) == want);
  CHECK(read_counts(confusion_matrix(to_dtype(scores, DType::f16), target)) == want);
  // Classification form: (N, K) scores, (N) targets.
  Tensor logits = tensor_from(std::vector<float>{0, 3, 4, 1}, {2, 2});
  CHECK(read_counts(confusion_matrix(logits, tensor_from(std::vector<int64_t>{1, 1}, {2}))) ==
        std::vector<int64_t>{0, 0, 1, 1});
  CHECK_THROWS_WITH_AS(confusion_matrix(scores, tensor_from(std::vector<int64_t>{0, 1, 1, 2}, {1, 4})),
                       doctest::Contains("target must be i64 (1, 2, 2)"), Error);
  Tensor bad = zeros({2, 2}, DType::i64);
  CHECK_THROWS_WITH_AS(confusion_matrix_add_(bad, scores, target), doctest::Contains("counts must be i64 (3, 3)"),
                       Error);
}

TEST_CASE("segment_metrics: pixel accuracy, IoU, Dice and the absent-class rule") {
  // K = 3; rows = target, columns = predicted. Class 2 appears in neither: no IoU, not in the mean.
  const std::vector<int64_t> c = {5, 1, 0,  //
                                  2, 3, 0,  //
                                  0, 0, 0};
  train::SegmentMetrics m = train::segment_metrics(c, 3, false);
  CHECK(m.pixels == 11);
  CHECK(m.pixel_accuracy == doctest::Approx(8.0 / 11.0).epsilon(1e-15));
  // class 0: TP 5, FP 2, FN 1; class 1: TP 3, FP 1, FN 2.
  CHECK(m.iou[0] == doctest::Approx(5.0 / 8.0).epsilon(1e-15));
  CHECK(m.iou[1] == doctest::Approx(3.0 / 6.0).epsilon(1e-15));
  CHECK(std::isnan(m.iou[2]));
  CHECK(m.present == std::vector<bool>{true, true, false});
  CHECK(m.dice[0] == doctest::Approx(11.0 / 14.0).epsilon(1e-15));  // (2*5 + 1) / (2*5 + 2 + 1 + 1)
  CHECK(m.dice[1] == doctest::Approx(7.0 / 10.0).epsilon(1e-15));   // (2*3 + 1) / (2*3 + 1 + 2 + 1)
  CHECK(m.dice[2] == 1.0);                                           // (0 + 1) / (0 + 1)
  CHECK(m.classes_in_mean == 2);
  CHECK(m.mean_iou == doctest::Approx((5.0 / 8.0 + 0.5) / 2).epsilon(1e-15));
  CHECK(m.mean_dice == doctest::Approx((11.0 / 14.0 + 0.7) / 2).epsilon(1e-15));
  // --ignore-background: class 0 leaves the means (not the per-class values).
  train::SegmentMetrics nb = train::segment_metrics(c, 3, true);
  CHECK(nb.classes_in_mean == 1);
  CHECK(nb.mean_iou == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(nb.mean_dice == doctest::Approx(0.7).epsilon(1e-15));
  CHECK(nb.iou[0] == m.iou[0]);
}

TEST_CASE("segment_metrics: a class only predicted counts with IoU 0, empty and malformed matrices") {
  // Class 1 is never a target but is predicted once: present, IoU 0, Dice 1/2.
  train::SegmentMetrics m = train::segment_metrics({4, 1, 0, 0}, 2, false);
  CHECK(m.present == std::vector<bool>{true, true});
  CHECK(m.iou[0] == doctest::Approx(0.8).epsilon(1e-15));
  CHECK(m.iou[1] == 0.0);
  CHECK(m.dice[1] == 0.5);
  CHECK(m.mean_iou == doctest::Approx(0.4).epsilon(1e-15));
  // Only background, with --ignore-background: nothing left to average.
  train::SegmentMetrics bg = train::segment_metrics({7, 0, 0, 0}, 2, true);
  CHECK(std::isnan(bg.mean_iou));
  CHECK(bg.classes_in_mean == 0);
  CHECK(bg.pixel_accuracy == 1.0);
  train::SegmentMetrics none = train::segment_metrics({0, 0, 0, 0}, 2, false);
  CHECK(none.pixels == 0);
  CHECK(std::isnan(none.pixel_accuracy));
  CHECK(std::isnan(none.mean_iou));
  // The all-background baseline of a matrix: rows moved to column 0.
  train::SegmentMetrics base = train::all_background_metrics(train::segment_metrics({5, 1, 0, 2, 3, 0, 0, 0, 0}, 3, false));
  CHECK(base.confusion == std::vector<int64_t>{6, 0, 0, 5, 0, 0, 0, 0, 0});
  CHECK(base.mean_iou == doctest::Approx(6.0 / 11.0 / 2.0).epsilon(1e-15));  // IoU0 6/11, IoU1 0
  CHECK_THROWS_WITH_AS(train::segment_metrics({1, 2, 3}, 2, false), doctest::Contains("3 counts for 2 classes"),
                       Error);
  CHECK_THROWS_WITH_AS(train::segment_metrics({1, -2, 3, 4}, 2, false), doctest::Contains("negative count"), Error);
}

TEST_CASE("evaluate_segmentation: metrics of the whole set, not a mean over batches") {
  // Two 2-class images of 1 x 4 pixels, one per batch; the pass-through model predicts from x.
  //   image 0: target 0 0 0 1, predicted 0 0 0 0  -> IoU0 3/4, IoU1 0
  //   image 1: target 1 1 1 1, predicted 1 1 1 1  -> class 0 absent: mIoU 1
  // Per-batch mean of mIoU: (3/8 + 1) / 2 = 0.6875. Whole set: C = [[3,0],[1,4]] -> IoU0 3/4,
  // IoU1 4/5, mIoU 0.775.
  MaskArrayDataset d;
  d.source = "test";
  d.n = 2, d.channels = 2, d.height = 1, d.width = 4;
  d.images = {2, 2, 2, 2, 0, 0, 0, 0,   // image 0: class 0 scores, class 1 scores
              0, 0, 0, 0, 1, 1, 1, 1};  // image 1
  d.masks = {0, 0, 0, 1, 1, 1, 1, 1};
  std::unique_ptr<DataSource> src = make_mask_array_source(d, 0, Device::cpu());
  PassThrough model;
  EvalResult r = train::evaluate_segmentation(model, *src, 1, 0);
  REQUIRE(r.segment.has_value());
  CHECK(r.n == 2);
  CHECK(r.segment->confusion == std::vector<int64_t>{3, 0, 1, 4});
  CHECK(r.segment->mean_iou == doctest::Approx(0.775).epsilon(1e-15));
  CHECK(r.accuracy == doctest::Approx(7.0 / 8.0).epsilon(1e-15));
  // The loss is the mean over all 8 pixels: compare with the cross-entropy of the whole set at once.
  Tensor all_x = tensor_from(d.images, {2, 2, 1, 4});
  Tensor all_y = tensor_from(d.masks, {2, 1, 4});
  CHECK(r.loss == doctest::Approx(train::segmentation_cross_entropy(all_x, all_y).item()).epsilon(1e-6));
  // With class weights: torch's weighted mean over the set (sum w[t] nll / sum w[t]).
  Tensor w = tensor_from(std::vector<float>{1.0f, 3.0f}, {2});
  EvalResult rw = train::evaluate_segmentation(model, *src, 1, 0, w);
  CHECK(rw.loss == doctest::Approx(train::segmentation_cross_entropy(all_x, all_y, w).item()).epsilon(1e-6));
  CHECK(rw.loss != doctest::Approx(r.loss).epsilon(1e-3));
  // --ignore-background.
  EvalResult nb = train::evaluate_segmentation(model, *src, 2, 0, Tensor(), true);
  CHECK(nb.segment->mean_iou == doctest::Approx(0.8).epsilon(1e-15));
}

TEST_CASE("segmentation loss: per-pixel cross-entropy with ignore 255, and the output-shape error") {
  // (1, 2, 1, 3) scores, targets 0, 255, 1: the ignored pixel contributes nothing.
  Tensor x = tensor_from(std::vector<float>{1, 5, 0, 0, 2, 3}, {1, 2, 1, 3});
  Tensor y = tensor_from(std::vector<int64_t>{0, 255, 1}, {1, 1, 3});
  const double l0 = std::log(1 + std::exp(-1.0)), l2 = std::log(1 + std::exp(-3.0));  // -log softmax
  CHECK(train::segmentation_cross_entropy(x, y).item() == doctest::Approx((l0 + l2) / 2).epsilon(1e-6));
  Tensor logits = zeros({1, 10});
  CHECK_THROWS_WITH_AS(train::check_segmentation_output(logits, y, "--model small_cnn"),
                       doctest::Contains("--model small_cnn: gives output (1, 10) for masks"), Error);
}

TEST_CASE("model card: the task round trip, an older file reads as classify, a bad task is an error") {
  kiln::ModelCard card;
  card.model = "unet";
  card.task = "segment";
  card.num_classes = 4;
  const kiln::ModelCard back = kiln::ModelCard::from_metadata(card.to_metadata(), "w.safetensors");
  CHECK(back.task == "segment");
  CHECK(back.missing == std::vector<std::string>{"image size", "channels", "resize/crop", "normalization mean/std",
                                                 "class names"});
  const kiln::ModelCard old = kiln::ModelCard::from_metadata({{"model", "small_cnn"}, {"num_classes", "3"}}, "old");
  CHECK(old.task == "classify");
  CHECK(std::find(old.missing.begin(), old.missing.end(), "model") == old.missing.end());
  CHECK_THROWS_WITH_AS(kiln::ModelCard::from_metadata({{"model", "x"}, {"task", "detect"}}, "bad.safetensors"),
                       doctest::Contains("bad.safetensors: metadata 'task' is 'detect'"), Error);
}
