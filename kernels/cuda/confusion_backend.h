// The CUDA entry point of the segmentation confusion matrix: the signature the CPU backend shares,
// declared once in kernels/common/api/confusion.inc, T = float or double. Kept out of nn_backend.h
// so only the op that calls it (engine/ops/segment_metrics_op.cpp) includes it. Device pointers on
// the current device; work queued on its compute stream; an out-of-range target is a deferred
// error (kernels/cuda/deferred_error.h), reported at the next host synchronization.
// STATUS: compiled for sm_80/sm_90; never run on a GPU yet (tests/cuda/test_cuda_confusion.cpp
// checks it against the CPU backend when a GPU is present).
#pragma once
#include <cstdint>

namespace kiln::cuda {

#include "kernels/common/api/confusion.inc"

}  // namespace kiln::cuda
