// SyncBatchNorm's op (engine/ops/nn_norm_sync.cpp) and the reducer it is given: batch norm in training
// mode with the statistics of the data-parallel global batch. It must not know MPI or the process
// group: the reducer is a function engine/train builds over its group.
#pragma once
#include <cstdint>
#include <functional>

#include "engine/tensor/tensor.h"

namespace kiln {

// Sums n doubles in place over the ranks of a data-parallel run (every rank calls it in the same
// order with the same n).
using ChannelSumReducer = std::function<void(double* data, int64_t n)>;

// What a rank's dgamma and dbeta hold: its own rows' sums (the gradient buckets then add the ranks'
// f32 values), the global sums (on exactly one rank, the others zero: the buckets' sum is then the
// global sums rounded once, as one process rounds them), or zeros.
enum class BnParamGrads { local, global, zero };

// Training-mode batch_norm (engine/ops/ops.h) over x (N, C, ...) with the ranks' global statistics:
// forward reduces [per-channel sums, this rank's values per channel] (C + 1 doubles), then the
// per-channel sums of squares centred on the global mean (C): the two-pass variance; backward reduces
// [sum dy, sum dy * (x - mean)] (2C). Running stats (when given) take the global mean and the unbiased
// global variance. N may be 0 on a rank. With one rank's sums it gives batch_norm's bits.
Tensor batch_norm_sync(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps, const ChannelSumReducer& reduce,
                       BnParamGrads param_grads = BnParamGrads::local);

// The process-wide reducer that every nn::BatchNorm2d in training mode uses when set (--sync-bn;
// engine/train/data_parallel.cpp sets it for the run and clears it after); empty: each rank's own batch.
void set_batch_norm_reducer(ChannelSumReducer reduce, BnParamGrads param_grads = BnParamGrads::local);
const ChannelSumReducer& batch_norm_reducer();
BnParamGrads batch_norm_reducer_param_grads();

}  // namespace kiln
