// The CUDA backend's NN kernel entry points: the signatures it shares with the CPU backend, declared
// once in kernels/common/api/{conv2d,pool,batch_norm,softmax,loss,dropout}.inc, templated on
// T = float or double (both instantiated).
// Device pointers on the current device; work queued on its compute stream.
// STATUS: all implemented (conv2d.cpp, pool.cu, batch_norm.cu, softmax.cu, loss.cu, dropout in
// elementwise.cu) and compiled for sm_80/sm_90; none of them has run on a GPU yet.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cuda {

// ---- convolution (conv2d.cpp, cuDNN) ----
// cuDNN's workspace comes from kiln's allocator (tag temporary) inside each call, so the
// `workspace` argument is ignored and conv2d_workspace_bytes is 0 on this backend.
#include "kernels/common/api/conv2d.inc"

// ---- per-channel bias add and gradient (bias.cu): the conv bias under --kernels kiln ----
#include "kernels/common/api/bias.inc"

// ---- pooling (pool.cu), batch norm (batch_norm.cu), softmax (softmax.cu) ----
#include "kernels/common/api/pool.inc"
#include "kernels/common/api/batch_norm.inc"
// the staged batch norm of SyncBatchNorm (batch_norm.cu): the sums stay on the device
#include "kernels/common/api/batch_norm_sync.inc"
#include "kernels/common/api/softmax.inc"

// ---- losses (loss.cu) ----
// Targets are validated on the device without a host sync: an out-of-range target gives NaN for
// that sample and throws kiln::Error (naming the op, position, target and K) at the next
// synchronizing call (to_device to the host, synchronize): kernels/cuda/deferred_error.h.
#include "kernels/common/api/loss.inc"

// ---- one-hot of class targets (one_hot.cu), for the Dice loss; errors deferred like the losses' ----
#include "kernels/common/api/one_hot.inc"

// ---- dropout (elementwise.cu): the same Philox mask as the CPU ----
#include "kernels/common/api/dropout.inc"

}  // namespace kiln::cuda
