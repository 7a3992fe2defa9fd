// The batch of one training step, as train::train_step takes it: x (N, ...) and y (N, ...) on the
// model's device, and, for a data-parallel rank with accumulation, the rows of each of its micro-batches
// (engine/dist/shard.h's shard_pieces; consecutive in x, some maybe empty). A data source's batch
// (data/data_source.h's SourceBatch) converts to it. Must not know sources or models.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "data/data_source.h"
#include "engine/tensor/tensor.h"

namespace kiln {

struct Batch {
  Tensor x, y;
  // Empty: the step cuts x into micro-batches by engine/dist/shard.h's rule itself.
  std::vector<int64_t> micro_rows;

  Batch() = default;
  Batch(Tensor x_, Tensor y_, std::vector<int64_t> micro_rows_ = {})
      : x(std::move(x_)), y(std::move(y_)), micro_rows(std::move(micro_rows_)) {}
  // A source's batch: its rows, and the rows of each piece of a shard it delivered (SourceBatch::micro_rows).
  Batch(const SourceBatch& b) : x(b.x), y(b.y), micro_rows(b.micro_rows) {}  // NOLINT: implicit on purpose
};

}  // namespace kiln
