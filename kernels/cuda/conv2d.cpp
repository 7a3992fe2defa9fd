// 2-D convolution on the GPU through cuDNN 9's convolution API (NCHW), as kernels/cpu/conv2d.h:
// forward (+ bias via cudnnAddTensor), input gradient, weight gradient (+ bias gradient). The
// algorithm of each (shape, dtype, direction, device) is chosen once by cuDNN's heuristics and
// cached; f32 uses FMA math (no TF32) unless allow_tf32(). Workspace comes from kiln's allocator
// under the `temporary` tag, on the compute stream, and is released right after the call.
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "engine/memory/allocator.h"
#include "engine/memory/tag.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {

size_t conv2d_workspace_bytes(const Conv2dDesc&, size_t) { return 0; }

#if defined(KILN_WITH_CUDNN)
namespace {

std::string desc_str(const Conv2dDesc& d, const char* op) {
  return str_cat(op, " x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, ") w (", d.K, ", ", d.C / d.groups, ", ", d.R,
                 ", ", d.S, ") stride ", d.stride_h, "x", d.stride_w, " pad ", d.pad_h, "x", d.pad_w, " dil ",
                 d.dil_h, "x", d.dil_w, " groups ", d.groups);
}

template <typename T> struct CudnnType;
template <> struct CudnnType<float> { static constexpr cudnnDataType_t value = CUDNN_DATA_FLOAT; };
template <> struct CudnnType<double> { static constexpr cudnnDataType_t value = CUDNN_DATA_DOUBLE; };

enum class Dir { fwd, bwd_data, bwd_filter };

// The cuDNN descriptors of one convolution call (destroyed with it).
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::string what;

  Descs(const Conv2dDesc& d, cudnnDataType_t dt, const char* op) : what(desc_str(d, op)) {
    KILN_CHECK(d.N > 0 && d.C > 0 && d.K > 0 && d.groups > 0 && d.C % d.groups == 0 && d.K % d.groups == 0 &&
                   d.out_h() > 0 && d.out_w() > 0,
               what, ": invalid convolution");
    for (int64_t v : {d.N, d.C, d.H, d.W, d.K, d.R, d.S, d.out_h(), d.out_w()})
      KILN_CHECK(v < (int64_t)1 << 31, what, ": a size exceeds cuDNN's 32-bit limit");
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), what);
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), what);
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias), what);
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), what);
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, (int)d.N, (int)d.C, (int)d.H, (int)d.W), what);
    KILN_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, (int)d.N, (int)d.K, (int)d.out_h(), (int)d.out_w()), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, dt, 1, (int)d.K, 1, 1), what);
    KILN_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, (int)d.K, (int)(d.C / d.groups), (int)d.R, (int)d.S), what);
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, (int)d.pad_h, (int)d.pad_w, (int)d.stride_h, (int)d.stride_w,
                                                     (int)d.dil_h, (int)d.dil_w, CUDNN_CROSS_CORRELATION, dt),
                     what);
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, (int)d.groups), what);
    const bool tf32 = dt == CUDNN_DATA_FLOAT && allow_tf32();
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), what);
  }
  ~Descs() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
};

struct Choice {
  int algo = 0;
  size_t workspace = 0;
};

using Key = std::tuple<int, int, int, bool, std::string>;  // device, dir, dtype, tf32, shape bytes

Key key_of(const Conv2dDesc& d, Dir dir, cudnnDataType_t dt, int dev) {
  std::string bytes(reinterpret_cast<const char*>(&d), sizeof(d));
  return Key(dev, (int)dir, (int)dt, allow_tf32(), bytes);
}

// Picks (once per key) the first heuristic algorithm that cuDNN supports for these descriptors,
// skipping Tensor Core math for f32 when TF32 is off.
Choice choose(const Conv2dDesc& d, Dir dir, cudnnDataType_t dt, int dev, cudnnHandle_t h, const Descs& ds) {
  static std::mutex mu;
  static std::map<Key, Choice> cache;
  Key k = key_of(d, dir, dt, dev);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  const bool no_tensor_ops = dt == CUDNN_DATA_FLOAT && !allow_tf32();
  auto usable = [&](cudnnStatus_t s, cudnnMathType_t m) {
    return s == CUDNN_STATUS_SUCCESS && !(no_tensor_ops && m != CUDNN_DEFAULT_MATH && m != CUDNN_FMA_MATH);
  };
  Choice c;
  bool found = false;
  constexpr int kMax = 16;
  int n = 0;
  if (dir == Dir::fwd) {
    cudnnConvolutionFwdAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, ds.x, ds.w, ds.conv, ds.y, kMax, &n, p), ds.what);
    for (int i = 0; i < n && !found; ++i)
      if (usable(p[i].status, p[i].mathType)) c = Choice{(int)p[i].algo, p[i].memory}, found = true;
  } else if (dir == Dir::bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, ds.w, ds.y, ds.conv, ds.x, kMax, &n, p), ds.what);
    for (int i = 0; i < n && !found; ++i)
      if (usable(p[i].status, p[i].mathType)) c = Choice{(int)p[i].algo, p[i].memory}, found = true;
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, ds.x, ds.y, ds.conv, ds.w, kMax, &n, p), ds.what);
    for (int i = 0; i < n && !found; ++i)
      if (usable(p[i].status, p[i].mathType)) c = Choice{(int)p[i].algo, p[i].memory}, found = true;
  }
  KILN_CHECK(found, ds.what, ": cuDNN offers no algorithm for this convolution (", n, " candidates rejected)");
  std::lock_guard<std::mutex> lock(mu);
  cache[k] = c;
  return c;
}

// Workspace from kiln's allocator (tag temporary), freed at scope exit; the allocator orders reuse
// on the compute stream after this call's kernels.
class Workspace {
 public:
  Workspace(int dev, size_t n) : alloc_(n ? allocator_for(Device::cuda(dev)) : nullptr) {
    if (!n) return;
    MemoryScope s(MemoryTag::temporary);
    ptr_ = alloc_->allocate(n);
  }
  ~Workspace() {
    if (ptr_) alloc_->deallocate(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  Allocator* alloc_;
  void* ptr_ = nullptr;
};

template <typename T>
struct Scalars {  // alpha/beta in cuDNN's scaling type (float for float data, double for double)
  T one = T(1), zero = T(0);
};

}  // namespace

template <typename T>
void conv2d_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void*) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, CudnnType<T>::value, "conv2d_forward");
  Choice c = choose(d, Dir::fwd, CudnnType<T>::value, dev, h, ds);
  Workspace ws(dev, c.workspace);
  Scalars<T> s;
  KILN_CUDNN_CHECK(cudnnConvolutionForward(h, &s.one, ds.x, x, ds.w, w, ds.conv, (cudnnConvolutionFwdAlgo_t)c.algo,
                                           ws.get(), c.workspace, &s.zero, ds.y, y),
                   ds.what);
  if (bias) KILN_CUDNN_CHECK(cudnnAddTensor(h, &s.one, ds.bias, bias, &s.one, ds.y, y), ds.what + " (bias)");
}

template <typename T>
void conv2d_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void*) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, CudnnType<T>::value, "conv2d_backward_input");
  Choice c = choose(d, Dir::bwd_data, CudnnType<T>::value, dev, h, ds);
  Workspace ws(dev, c.workspace);
  Scalars<T> s;
  KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &s.one, ds.w, w, ds.y, dy, ds.conv,
                                                (cudnnConvolutionBwdDataAlgo_t)c.algo, ws.get(), c.workspace, &s.zero,
                                                ds.x, dx),
                   ds.what);
}

template <typename T>
void conv2d_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, T* dbias, void*) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, CudnnType<T>::value, "conv2d_backward_weight");
  Choice c = choose(d, Dir::bwd_filter, CudnnType<T>::value, dev, h, ds);
  Workspace ws(dev, c.workspace);
  Scalars<T> s;
  KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &s.one, ds.x, x, ds.y, dy, ds.conv,
                                                  (cudnnConvolutionBwdFilterAlgo_t)c.algo, ws.get(), c.workspace,
                                                  &s.zero, ds.w, dw),
                   ds.what);
  if (dbias)
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &s.one, ds.y, dy, &s.zero, ds.bias, dbias), ds.what + " (bias)");
}

#else  // no cuDNN found at configure time

template <typename T>
void conv2d_forward(const Conv2dDesc&, const T*, const T*, const T*, T*, void*) {
  throw Error("conv2d_forward on cuda: kiln was built without cuDNN");
}
template <typename T>
void conv2d_backward_input(const Conv2dDesc&, const T*, const T*, T*, void*) {
  throw Error("conv2d_backward_input on cuda: kiln was built without cuDNN");
}
template <typename T>
void conv2d_backward_weight(const Conv2dDesc&, const T*, const T*, T*, T*, void*) {
  throw Error("conv2d_backward_weight on cuda: kiln was built without cuDNN");
}

#endif

#define KILN_INSTANTIATE_CONV(T)                                                                        \
  template void conv2d_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*);          \
  template void conv2d_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);             \
  template void conv2d_backward_weight<T>(const Conv2dDesc&, const T*, const T*, T*, T*, void*);
KILN_INSTANTIATE_CONV(float)
KILN_INSTANTIATE_CONV(double)
#undef KILN_INSTANTIATE_CONV

}  // namespace kiln::cuda
