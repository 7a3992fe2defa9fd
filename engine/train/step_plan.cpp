// A step's micro-batches (see step_plan.h).
#include "engine/train/step_plan.h"

#include "engine/dist/shard.h"
#include "engine/ops/ops.h"

namespace kiln::train {

int64_t StepPlan::last_run() const {
  for (int64_t k = size() - 1; k >= 0; --k)
    if (runs_here(k)) return k;
  return -1;
}

RngRows StepPlan::keyed_rows(int64_t k) const {
  if (ranks <= 1) return RngRows{};
  int64_t first = 0, total = 0;
  for (int q = 0; q < ranks; ++q) {
    const int64_t rows = rows_of[(size_t)(k * ranks + q)];
    if (q < rank) first += rows;
    total += rows;
  }
  return RngRows{first, micro[(size_t)k].size, total};
}

StepPlan plan_step(const Batch& batch, int64_t accum, bool pad_to_accum,
                   const std::function<bool(const Tensor& y)>& loss_undefined, bool meta) {
  StepPlan p;
  const int64_t n = batch.x.size(0);
  if (!batch.micro_rows.empty()) {  // a data-parallel rank's shares of the global micro-batches
    int64_t offset = 0;
    for (int64_t rows : batch.micro_rows) {
      KILN_CHECK(rows >= 0, "train_step: batch.micro_rows holds ", rows, " rows");
      p.micro.push_back({offset, rows, false});
      offset += rows;
    }
    KILN_CHECK(offset == n, "train_step: batch.micro_rows sums to ", offset, " rows, the batch has ", n);
  } else {
    for (const dist::ShardRange& r : dist::micro_batch_ranges(n, accum)) p.micro.push_back({r.offset, r.rows, false});
    while (pad_to_accum && p.size() < accum) p.micro.push_back({n, 0, false});
  }
  p.samples = n;
  for (MicroRange& m : p.micro) {
    if (!meta && loss_undefined && m.size > 0) m.left_out = loss_undefined(narrow(batch.y, 0, m.offset, m.size));
    if (m.left_out) ++p.undefined_micro_batches;
    else p.used += m.size;
  }
  return p;
}

}  // namespace kiln::train
