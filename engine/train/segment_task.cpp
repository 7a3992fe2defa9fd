// Segmentation as a training task (see segment_task.h).
#include "engine/train/segment_task.h"

#include <algorithm>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"

namespace kiln::train {

void check_segmentation_output(const Tensor& output, const Tensor& target, const std::string& who) {
  const bool ok = output.defined() && target.defined() && output.dim() == 4 && target.dim() == 3 &&
                  target.dtype() == DType::i64 && output.size(0) == target.size(0) &&
                  output.size(2) == target.size(1) && output.size(3) == target.size(2) && output.size(1) >= 1 &&
                  output.size(1) <= kSegmentMaxClasses;
  if (ok) return;
  const std::string out = output.defined() ? shape_str(output.sizes()) : "(none)";
  const std::string tgt = target.defined() ? target.str() : "(none)";
  if (output.defined() && output.dim() == 4 && output.size(1) > kSegmentMaxClasses)
    throw Error(str_cat(who, ": output ", out, " has ", output.size(1), " classes; segmentation takes at most ",
                        kSegmentMaxClasses, " (masks are 8-bit, 255 = ignore)"));
  throw Error(str_cat(who, ": gives output ", out, " for masks ", tgt,
                      "; segmentation needs (N, K, H, W) class scores at the masks' (N, H, W) size (a fully "
                      "convolutional model such as a UNet)"));
}

Tensor segmentation_cross_entropy(const Tensor& output, const Tensor& target, const Tensor& class_weights,
                                  Reduction reduction) {
  check_segmentation_output(output, target, "segmentation loss");
  return cross_entropy(output, target, class_weights, reduction, kSegmentIgnoreIndex);  // per-pixel form
}

LossFn segmentation_loss(const std::string& kind, const Tensor& class_weights) {
  KILN_CHECK(kind == "ce" || kind == "dice" || kind == "ce+dice", "segmentation loss '", kind,
             "': expected ce, dice or ce+dice");
  return [kind, class_weights](const Tensor& output, const Tensor& y) {
    if (kind == "ce") return segmentation_cross_entropy(output, y, class_weights);
    check_segmentation_output(output, y, "segmentation loss");
    Tensor dice = dice_loss(output, y, kSegmentIgnoreIndex, 1.0, true);
    return kind == "dice" ? dice : add(segmentation_cross_entropy(output, y, class_weights), dice);
  };
}

namespace {

bool has_zero_weight(const Tensor& w) {
  if (!w.defined() || w.device().is_meta()) return false;
  const std::vector<float> v = to_device(to_dtype(w, DType::f32), Device::cpu()).to_vector<float>();
  return std::find(v.begin(), v.end(), 0.0f) != v.end();
}

// Pixels of y equal to the ignore index, as an f64 device scalar.
Tensor ignored_pixels(const Tensor& y) {
  return sum(to_dtype(eq(y, scalar_tensor((double)kSegmentIgnoreIndex, DType::i64, y.device())), DType::f64));
}

}  // namespace

void use_segmentation_step(StepOptions* o, const Tensor& class_weights, const std::string& loss) {
  o->loss = segmentation_loss(loss, class_weights);
  o->metric = [](const MicroBatch& b) {
    NoGradGuard no_grad;
    // K <= 255, so an ignored pixel (255) never equals a predicted class.
    return sum(to_dtype(eq(argmax(b.output.detach(), 1), b.y), DType::f64));
  };
  o->metric_total = [](const MicroBatch& b) {
    NoGradGuard no_grad;
    return rsub(ignored_pixels(b.y), (double)b.y.numel());
  };
  if (has_zero_weight(class_weights)) {
    std::vector<float> w = to_device(to_dtype(class_weights, DType::f32), Device::cpu()).to_vector<float>();
    o->loss_undefined = [w](const Tensor& y) {
      for (int64_t t : to_device(y, Device::cpu()).to_vector<int64_t>())
        if (t != kSegmentIgnoreIndex && (t < 0 || t >= (int64_t)w.size() || w[(size_t)t] != 0.0f)) return false;
      return true;
    };
  } else {
    o->loss_undefined = [](const Tensor& y) {
      NoGradGuard no_grad;
      return to_device(ignored_pixels(y), Device::cpu()).item() == (double)y.numel();
    };
  }
}

EvalResult evaluate_segmentation(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                                 const Tensor& class_weights, bool ignore_background,
                                 const std::function<void(const Tensor&, const SourceBatch&)>& on_batch) {
  model.eval();
  NoGradGuard no_grad;
  data.start_epoch(epoch, batch, false);
  EvalResult r;
  Tensor counts, loss_sum;  // on the device: (K, K) i64 and the f64 sum of w[t] * nll over the set
  int64_t K = 0;
  SourceBatch b;
  while (data.next(&b)) {
    if (b.x.size(0) == 0) continue;
    MemoryScope scope(MemoryTag::temporary);
    Tensor out = model(b.x);
    check_segmentation_output(out, b.y, "evaluate_segmentation: the model");
    if (!counts.defined()) {
      K = out.size(1);
      MemoryScope keep(MemoryTag::other);
      counts = zeros({K, K}, DType::i64, out.device());
      loss_sum = zeros({}, DType::f64, out.device());
    }
    KILN_CHECK(out.size(1) == K, "evaluate_segmentation: the model gave ", out.size(1), " classes after ", K);
    confusion_matrix_add_(counts, out, b.y, kSegmentIgnoreIndex);
    Tensor part = to_dtype(segmentation_cross_entropy(out, b.y, class_weights, Reduction::sum), DType::f64);
    loss_sum = add(loss_sum, part);
    r.n += b.x.size(0);
    if (on_batch) on_batch(contiguous(to_device(out, Device::cpu())), b);
  }
  if (!counts.defined() || counts.device().is_meta()) return r;  // meta: a memory plan, no values
  // The set's one read: the matrix and the loss sum.
  const std::vector<int64_t> c = to_device(counts, Device::cpu()).to_vector<int64_t>();
  const double ls = to_device(loss_sum, Device::cpu()).item();
  // torch's mean over the whole set: sum of w[t] * nll / sum of w[t] over counted pixels, and
  // the pixels of class t are the confusion matrix's row t.
  std::vector<float> w;
  if (class_weights.defined()) w = to_device(to_dtype(class_weights, DType::f32), Device::cpu()).to_vector<float>();
  double denom = 0;
  for (int64_t t = 0; t < K; ++t) {
    int64_t row = 0;
    for (int64_t p = 0; p < K; ++p) row += c[(size_t)(t * K + p)];
    denom += (w.empty() ? 1.0 : (double)w[(size_t)t]) * (double)row;
  }
  r.loss = denom > 0 ? ls / denom : 0.0;
  r.segment = segment_metrics(c, K, ignore_background);
  r.accuracy = r.segment->pixels > 0 ? r.segment->pixel_accuracy : 0.0;
  return r;
}

}  // namespace kiln::train
