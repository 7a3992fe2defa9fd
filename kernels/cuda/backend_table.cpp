// The cuda backend table (kernels/common/cuda_backend.h) filled from this backend's functions: every
// entry point KILN_DISPATCH reaches, the 16-bit convolutions, the --kernels switch and the runtime
// (copies, synchronize, current device, the allocator's hooks). Compiled twice: into libkiln in a CUDA
// build (kiln::cuda, the table in force from the start), and into kiln_cuda_cpu (kiln::cuda_on_cpu by
// the CPU mode's rename, installed by kiln::cuda_on_cpu::install_as_cuda_backend()). So both fill the
// same entries from the same lines; a missing function fails to link. No logic of its own.
#include "kernels/common/cuda_backend.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/confusion_backend.h"
#include "kernels/cuda/conv2d_16.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/kernel_select.h"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/runtime_hooks.h"
#include "kernels/cuda/upsampling_backend.h"

namespace kiln::cuda {

namespace {

template <typename T>
CudaTypedEntries<T> typed_entries() {
  CudaTypedEntries<T> e;
#define KILN_FILL_TYPED_(fn) e.fn = &fn<T>;
  KILN_CUDA_BACKEND_TYPED_ENTRIES(KILN_FILL_TYPED_)
#undef KILN_FILL_TYPED_
  return e;
}

ConvLayout layout_of(bool nhwc) { return nhwc ? ConvLayout::nhwc : ConvLayout::nchw; }

CudaBackend make_table() {
  CudaBackend b;
#if defined(KILN_CUDA_ON_CPU)
  b.name = "CPU execution mode";
#else
  b.name = "CUDA";
#endif
  b.runtime = runtime_hooks();
#define KILN_FILL_(fn) b.fn = &fn;
  KILN_CUDA_BACKEND_ENTRIES(KILN_FILL_)
#undef KILN_FILL_
  b.f32 = typed_entries<float>();
  b.f64 = typed_entries<double>();
  b.conv2d_16_uses_kiln = &conv2d_16_uses_kiln;
  b.conv2d_16_forward = [](const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* w, void* y) {
    conv2d_16_forward(d, dt, layout_of(nhwc), x, w, y);
  };
  b.conv2d_16_backward_input = [](const Conv2dDesc& d, DType dt, bool nhwc, const void* dy, const void* w,
                                  void* dx) { conv2d_16_backward_input(d, dt, layout_of(nhwc), dy, w, dx); };
  b.conv2d_16_backward_weight = [](const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* dy,
                                   void* dw) { conv2d_16_backward_weight(d, dt, layout_of(nhwc), x, dy, dw); };
  b.bias_uses_kiln = [] { return bias_uses_kiln(); };
  b.set_kernels_kiln = [](bool kiln) { set_kernel_source(kiln ? KernelSource::kiln : KernelSource::vendor); };
  b.copy_bytes = &copy_bytes;
  b.synchronize = &synchronize;
  b.current_device = &current_device;
  b.set_device = &set_device;
  return b;
}

}  // namespace

const CudaBackend& backend_table() {
  static const CudaBackend b = make_table();
  return b;
}

}  // namespace kiln::cuda
