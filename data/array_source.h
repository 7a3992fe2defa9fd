// An in-memory ArrayDataset (IDX, npy) as a DataSource: training epochs cut the (seed, epoch)
// permutation into consecutive batches; evaluation keeps the data set's order. No augmentation.
// Data-parallel (shard()): a training batch holds only the rank's rows of the global batch (gathered alone).
#pragma once
#include <cstdint>
#include <memory>

#include "data/array_dataset.h"
#include "data/data_source.h"

namespace kiln {

std::unique_ptr<DataSource> make_array_source(ArrayDataset data, uint64_t seed, Device device);

}  // namespace kiln
