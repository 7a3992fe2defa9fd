// Evaluation over a data set (see evaluate.h).
#include "engine/train/evaluate.h"

#include <cmath>

#include "engine/train/batch.h"

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {

int64_t count_correct(const Tensor& logits, const Tensor& y) {
  KILN_CHECK(logits.dim() == 2 && y.dim() == 1 && y.size(0) == logits.size(0), "count_correct: logits ",
             shape_str(logits.sizes()), " and labels ", shape_str(y.sizes()));
  const std::vector<float> l = to_device(to_dtype(logits.detach(), DType::f32), Device::cpu()).to_vector<float>();
  const std::vector<int64_t> t = to_device(y, Device::cpu()).to_vector<int64_t>();
  const int64_t b = logits.size(0), k = logits.size(1);
  int64_t correct = 0;
  for (int64_t i = 0; i < b; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (l[(size_t)(i * k + j)] > l[(size_t)(i * k + best)]) best = j;
    correct += best == t[(size_t)i];
  }
  return correct;
}

Tensor count_correct_tensor(const Tensor& logits, const Tensor& y) {
  KILN_CHECK(logits.dim() == 2 && y.dim() == 1 && y.size(0) == logits.size(0), "count_correct: logits ",
             shape_str(logits.sizes()), " and labels ", shape_str(y.sizes()));
  NoGradGuard no_grad;
  return sum(to_dtype(eq(argmax(logits.detach(), 1), y), DType::f64));
}

EvalResult evaluate(nn::Module& model, const ArrayDataset& data, int64_t batch, Device device,
                    const Tensor& class_weights, const std::function<void(const Tensor&, int64_t)>& on_batch) {
  model.eval();
  NoGradGuard no_grad;
  std::vector<int64_t> order((size_t)data.n);
  for (int64_t i = 0; i < data.n; ++i) order[(size_t)i] = i;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t b = 0; b < data.n; b += batch) {
    const int64_t e = std::min(data.n, b + batch);
    Batch bt = gather_batch(data, order, b, e, device);
    MemoryScope scope(MemoryTag::temporary);
    Tensor logits = model(bt.x);
    Tensor loss = cross_entropy(logits, bt.y, class_weights);
    loss_sum += to_device(loss, Device::cpu()).item() * (double)(e - b);
    correct += count_correct(logits, bt.y);
    if (on_batch) on_batch(contiguous(to_device(logits, Device::cpu())), b);
  }
  r.n = data.n;
  r.loss = data.n ? loss_sum / (double)data.n : 0.0;
  r.correct = correct;
  r.accuracy = data.n ? (double)correct / (double)data.n : 0.0;
  return r;
}

EvalResult evaluate_source(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                           const Tensor& class_weights,
                           const std::function<void(const Tensor&, const SourceBatch&)>& on_batch) {
  model.eval();
  NoGradGuard no_grad;
  data.start_epoch(epoch, batch, false);
  EvalResult r;
  Tensor sums;  // (2) f64 on the device: [sum of loss * rows, correct predictions], read once at the end
  SourceBatch b;
  while (data.next(&b)) {
    const int64_t n = b.x.size(0);
    if (n == 0) continue;
    MemoryScope scope(MemoryTag::temporary);
    Tensor logits = model(b.x);
    Tensor loss = cross_entropy(logits, b.y, class_weights);
    Tensor part = cat({reshape(mul(to_dtype(loss, DType::f64), (double)n), {1}),
                       reshape(count_correct_tensor(logits, b.y), {1})});
    sums = sums.defined() ? add(sums, part) : part;
    r.n += n;
    if (on_batch && !logits.device().is_meta()) on_batch(contiguous(to_device(logits, Device::cpu())), b);
  }
  // The set's one read (none on the meta device: a memory plan replays the allocations only).
  if (!sums.defined() || sums.device().is_meta()) return r;
  const std::vector<double> v = to_device(sums, Device::cpu()).to_vector<double>();
  r.loss = v[0] / (double)r.n;
  r.correct = (int64_t)std::llround(v[1]);
  r.accuracy = v[1] / (double)r.n;
  return r;
}

}  // namespace kiln
