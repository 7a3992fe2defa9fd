// 2-D convolution on the GPU through cuDNN 9's convolution API, as kernels/cpu/conv2d.h:
// forward (+ bias via cudnnAddTensor), input gradient, weight gradient (+ bias gradient). The
// candidate algorithms of each (shape, dtype, layout, direction, device, benchmark mode) come once
// from cuDNN's heuristics, or with cudnn_benchmark() from cudnnFind*AlgorithmEx timings, and are
// cached; each call sets the candidate's math type on the descriptor, queries that algorithm's
// workspace, and falls back to the next candidate on any failure of this one (math type, query,
// workspace, the call's status). f32 uses FMA math (no TF32) unless allow_tf32().
// Descriptor dims, compute / math types and the workspace filtering are the host arithmetic of
// cudnn_args.h (unit-tested on the CPU). Workspace comes from kiln's allocator under the `temporary` tag,
// on the compute stream, and is
// released right after the call; candidates needing more than cudnn_workspace_limit()
// (kernels/common/workspace_limit.h, KILN_CUDNN_WORKSPACE_LIMIT) are skipped, so `kiln mem` can
// state the bound.
// Under `--kernels kiln` (bias_uses_kiln) the f32/f64 bias add and bias gradient run on kiln's bias
// kernels (bias.cu) instead of cudnnAddTensor / cudnnConvolutionBackwardBias.
// The 16-bit entry points of conv2d_16.h (f16/bf16 data, f32 accumulation, Tensor Core math, NCHW
// or NHWC) live here too: cuDNN by default, kiln's implicit-GEMM kernels (igemm_conv.h) for f16
// when kernel_source() is kiln.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/core/host_sync.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/conv2d_16.h"
#include "kernels/cuda/cudnn_args.h"
#include "kernels/cuda/igemm_conv.h"
#include "kernels/cuda/kernel_select.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/workspace.h"
#include "kernels/common/workspace_limit.h"

namespace kiln::cuda {

size_t conv2d_workspace_bytes(const Conv2dDesc&, size_t) { return 0; }

#if defined(KILN_WITH_CUDNN)
namespace {

std::string desc_str(const Conv2dDesc& d, const char* op) {
  return str_cat(op, " x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, ") w (", d.K, ", ", d.C / d.groups, ", ", d.R,
                 ", ", d.S, ") stride ", d.stride_h, "x", d.stride_w, " pad ", d.pad_h, "x", d.pad_w, " dil ",
                 d.dil_h, "x", d.dil_w, " groups ", d.groups);
}

const char* dt_name(cudnnDataType_t dt) {
  switch (dt) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_DOUBLE: return "f64";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    default: return "?";
  }
}

// cudnn_args.h's enums as cuDNN's and back.
CudnnData kiln_data(cudnnDataType_t dt) {
  switch (dt) {
    case CUDNN_DATA_FLOAT: return CudnnData::f32;
    case CUDNN_DATA_DOUBLE: return CudnnData::f64;
    case CUDNN_DATA_HALF: return CudnnData::f16;
    case CUDNN_DATA_BFLOAT16: return CudnnData::bf16;
    default: throw Error(str_cat("conv2d on cuda: cuDNN data type ", (int)dt, " not supported"));
  }
}
cudnnDataType_t cudnn_data(CudnnData dt) {
  switch (dt) {
    case CudnnData::f32: return CUDNN_DATA_FLOAT;
    case CudnnData::f64: return CUDNN_DATA_DOUBLE;
    case CudnnData::f16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_BFLOAT16;
  }
}
cudnnMathType_t cudnn_math(CudnnMath m) {
  switch (m) {
    case CudnnMath::tensor_op: return CUDNN_TENSOR_OP_MATH;
    case CudnnMath::default_math: return CUDNN_DEFAULT_MATH;
    default: return CUDNN_FMA_MATH;
  }
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

  // dt: the data type of x, w, y; nhwc: x/y NHWC and w KRSC in memory (else NCHW / KCRS). f16 and
  // bf16 accumulate in f32 (computeType FLOAT) on Tensor Cores.
  Descs(const Conv2dDesc& d, cudnnDataType_t dt, bool nhwc, const char* op)
      : what(str_cat(desc_str(d, op), nhwc ? " NHWC " : " NCHW ", dt_name(dt))) {
    const char* invalid = cudnn_conv_invalid(d);
    KILN_CHECK(*invalid == 0, what, ": ", invalid);
    // The dims, strides' format, compute and math types: cudnn_args.h (unit-tested on the CPU).
    const CudnnConvArgs a = cudnn_conv_args(d, kiln_data(dt), nhwc, allow_tf32());
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), what);
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), what);
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias), what);
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), what);
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), what);
    // Dimensions are always given as (n, c, h, w); the format names the memory order.
    const cudnnTensorFormat_t fmt = a.layout == CudnnLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, fmt, dt, (int)a.x.n, (int)a.x.c, (int)a.x.h, (int)a.x.w), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, fmt, dt, (int)a.y.n, (int)a.y.c, (int)a.y.h, (int)a.y.w), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, dt, (int)a.bias.n, (int)a.bias.c,
                                                (int)a.bias.h, (int)a.bias.w),
                     what);
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dt, fmt, (int)a.w.n, (int)a.w.c, (int)a.w.h, (int)a.w.w), what);
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, (int)a.pad_h, (int)a.pad_w, (int)a.stride_h, (int)a.stride_w,
                                                     (int)a.dil_h, (int)a.dil_w, CUDNN_CROSS_CORRELATION,
                                                     cudnn_data(a.compute)),
                     what);
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, (int)a.groups), what);
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, cudnn_math(a.math)), what);
  }
  ~Descs() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
};

// One algorithm cuDNN offers for a convolution: its id, workspace and the math type it was
// measured / proposed with (set on the descriptor before every call that uses it).
struct Candidate {
  int algo = 0;
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// The usable candidates of one key, best first, and the one in use (advanced past candidates
// that failed at run time; its workspace is the queried one once it ran).
struct Choice {
  std::vector<Candidate> cands;
  size_t current = 0;
};

// device, dir, dtype, tf32, nhwc, benchmark, shape bytes
using Key = std::tuple<int, int, int, bool, bool, bool, std::string>;

Key key_of(const Conv2dDesc& d, Dir dir, cudnnDataType_t dt, bool nhwc, int dev) {
  std::string bytes(reinterpret_cast<const char*>(&d), sizeof(d));
  return Key(dev, (int)dir, (int)dt, allow_tf32(), nhwc, cudnn_benchmark(), bytes);
}

std::mutex g_mu;
std::map<Key, Choice> g_cache;

// Tensor Core math for f32 only when TF32 is allowed. f32 without TF32 also keeps to the GEMM-
// and direct-family algorithms: FFT and Winograd transform the data and lose accuracy (errors
// near 1e-4 relative), which would break "f32 on the GPU equals f32 on the CPU to 1e-5/1e-4".
struct Filter {
  Dir dir;
  bool no_tensor_ops;
  bool usable(cudnnStatus_t s, cudnnMathType_t m) const {
    return s == CUDNN_STATUS_SUCCESS && !(no_tensor_ops && m != CUDNN_DEFAULT_MATH && m != CUDNN_FMA_MATH);
  }
  bool precise(int algo) const {
    if (!no_tensor_ops) return true;
    switch (dir) {
      case Dir::fwd:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
      case Dir::bwd_data:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
      default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    }
  }
  // f32 without TF32 runs with FMA math whatever the candidate reports (DEFAULT could pick TF32
  // on some cuDNN versions); 16-bit keeps the reported math (TENSOR_OP or DEFAULT).
  cudnnMathType_t math_for(cudnnMathType_t m) const { return no_tensor_ops ? CUDNN_FMA_MATH : m; }
};

// The buffers of a call, for cudnnFind*AlgorithmEx (it runs every algorithm on them; the
// output buffer is overwritten, which the call itself does right after anyway).
struct Buffers {
  const void* a;  // fwd: x, bwd_data: w, bwd_filter: x
  const void* b;  // fwd: w, bwd_data: dy, bwd_filter: dy
  void* out;      // fwd: y, bwd_data: dx, bwd_filter: dw
};

template <typename Perf>
void take(const Perf* p, int n, const Filter& f, std::vector<Candidate>* out) {
  for (int i = 0; i < n; ++i)
    if (f.usable(p[i].status, p[i].mathType) && f.precise((int)p[i].algo))
      out->push_back(Candidate{(int)p[i].algo, p[i].memory, f.math_for(p[i].mathType)});
}

// Candidates from cuDNN's heuristics (default), or measured with cudnnFind*AlgorithmEx on the
// call's own buffers (benchmark mode, like torch.backends.cudnn.benchmark), with a workspace as
// large as the largest heuristic candidate's, from kiln's allocator. Find times the algorithms
// and so waits for the device: counted as a host sync, once per key.
std::vector<Candidate> candidates(Dir dir, cudnnDataType_t dt, int dev, cudnnHandle_t h, const Descs& ds,
                                  const Buffers& buf) {
  const Filter f{dir, dt == CUDNN_DATA_FLOAT && !allow_tf32()};
  constexpr int kMax = 16;
  int n = 0;
  std::vector<Candidate> heur;
  if (dir == Dir::fwd) {
    cudnnConvolutionFwdAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, ds.x, ds.w, ds.conv, ds.y, kMax, &n, p), ds.what);
    take(p, n, f, &heur);
  } else if (dir == Dir::bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, ds.w, ds.y, ds.conv, ds.x, kMax, &n, p), ds.what);
    take(p, n, f, &heur);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, ds.x, ds.y, ds.conv, ds.w, kMax, &n, p), ds.what);
    take(p, n, f, &heur);
  }
  KILN_CHECK(!heur.empty(), ds.what, ": cuDNN offers no algorithm for this convolution (", n, " candidates rejected)");
  {
    std::vector<size_t> need;
    for (const Candidate& c : heur) need.push_back(c.workspace);
    std::vector<Candidate> within;
    for (size_t i : candidates_within_workspace(need, cudnn_workspace_limit(), ds.what)) within.push_back(heur[i]);
    heur.swap(within);
  }
  if (!cudnn_benchmark()) return heur;

  std::vector<size_t> need;
  for (const Candidate& c : heur) need.push_back(c.workspace);
  const size_t ws_bytes = find_workspace_bytes(need);
  Workspace ws(dev, ws_bytes);
  std::vector<Candidate> found;
  note_host_sync(HostSyncKind::device_sync);
  if (dir == Dir::fwd) {
    cudnnConvolutionFwdAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, ds.x, buf.a, ds.w, buf.b, ds.conv, ds.y, buf.out, kMax,
                                                            &n, p, ws.get(), ws_bytes),
                     ds.what + " (benchmark)");
    take(p, n, f, &found);
  } else if (dir == Dir::bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, ds.w, buf.a, ds.y, buf.b, ds.conv, ds.x, buf.out,
                                                                 kMax, &n, p, ws.get(), ws_bytes),
                     ds.what + " (benchmark)");
    take(p, n, f, &found);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[kMax];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, ds.x, buf.a, ds.y, buf.b, ds.conv, ds.w, buf.out,
                                                                   kMax, &n, p, ws.get(), ws_bytes),
                     ds.what + " (benchmark)");
    take(p, n, f, &found);
  }
  // Measured order first; heuristic candidates Find could not run (workspace) stay as fallbacks.
  for (const Candidate& c : heur) {
    bool seen = false;
    for (const Candidate& d : found) seen = seen || (d.algo == c.algo && d.math == c.math);
    if (!seen) found.push_back(c);
  }
  return found;
}

// The workspace the chosen algorithm needs with the math type now set on the descriptor (the
// heuristic's `memory` field is its estimate for the listed math type, not this query's answer).
cudnnStatus_t workspace_size(Dir dir, cudnnHandle_t h, const Descs& ds, int algo, size_t* bytes) {
  if (dir == Dir::fwd)
    return cudnnGetConvolutionForwardWorkspaceSize(h, ds.x, ds.w, ds.conv, ds.y, (cudnnConvolutionFwdAlgo_t)algo,
                                                   bytes);
  if (dir == Dir::bwd_data)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, ds.w, ds.y, ds.conv, ds.x,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, ds.x, ds.y, ds.conv, ds.w,
                                                        (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

// Runs `call(candidate, workspace)` with the cached candidate of this key. Each candidate's workspace
// is queried for the algorithm with its math type set (issue 33, defect 7: it was taken from the
// heuristic's estimate); any failure of a candidate (the math type, the query, a workspace over kiln's
// limit or one kiln's allocator cannot give, the call's own status) moves on to the next one, as
// PyTorch's try-all does, and the error after the last names what each one answered. The one that ran
// is remembered with its queried workspace.
template <typename Call>
void run_with_fallback(const Conv2dDesc& d, Dir dir, cudnnDataType_t dt, bool nhwc, int dev, cudnnHandle_t h,
                       const Descs& ds, const Buffers& buf, Call call) {
  const Key k = key_of(d, dir, dt, nhwc, dev);
  Choice c;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_cache.find(k);
    if (it != g_cache.end()) c = it->second, cached = true;
  }
  if (!cached) c.cands = candidates(dir, dt, dev, h, ds, buf);
  std::string tried;
  auto failed = [&](const Candidate& cand, const std::string& why) {
    tried += str_cat(tried.empty() ? "" : "; ", "algo ", cand.algo, " math ", (int)cand.math, ": ", why);
  };
  for (size_t i = c.current; i < c.cands.size(); ++i) {
    Candidate cand = c.cands[i];
    cudnnStatus_t st = cudnnSetConvolutionMathType(ds.conv, cand.math);
    size_t need = 0;
    if (st == CUDNN_STATUS_SUCCESS) st = workspace_size(dir, h, ds, cand.algo, &need);
    if (st != CUDNN_STATUS_SUCCESS) {
      failed(cand, cudnnGetErrorString(st));
      continue;
    }
    if (need > cudnn_workspace_limit()) {
      failed(cand, str_cat("workspace ", need, " bytes over kiln's limit of ", cudnn_workspace_limit()));
      continue;
    }
    cand.workspace = need;
    try {
      Workspace ws(dev, need);
      st = call(cand, ws.get());
    } catch (const OutOfMemory& e) {
      failed(cand, str_cat("workspace ", need, " bytes: ", e.what()));
      continue;
    }
    if (st != CUDNN_STATUS_SUCCESS) {
      failed(cand, cudnnGetErrorString(st));
      continue;
    }
    if (!cached || i != c.current || c.cands[i].workspace != need) {
      c.current = i;
      c.cands[i].workspace = need;
      std::lock_guard<std::mutex> lock(g_mu);
      g_cache[k] = c;
    }
    return;
  }
  throw Error(str_cat(ds.what, ": no cuDNN algorithm ran (", tried, ")"));
}

template <typename T>
struct Scalars {  // alpha/beta in cuDNN's scaling type (float for float data, double for double)
  T one = T(1), zero = T(0);
};

// The three cuDNN passes for every data type: descriptors, the cached algorithm, workspace from
// kiln's allocator. S is cuDNN's scaling type (double for double data, float for float and 16-bit).
// A null bias / dbias skips the bias term.
template <typename S>
void forward_pass(const Conv2dDesc& d, cudnnDataType_t cdt, bool nhwc, const void* x, const void* w,
                  const void* bias, void* y) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, cdt, nhwc, "conv2d_forward");
  Scalars<S> s;
  run_with_fallback(d, Dir::fwd, cdt, nhwc, dev, h, ds, Buffers{x, w, y}, [&](const Candidate& c, void* ws) {
    return cudnnConvolutionForward(h, &s.one, ds.x, x, ds.w, w, ds.conv, (cudnnConvolutionFwdAlgo_t)c.algo, ws,
                                   c.workspace, &s.zero, ds.y, y);
  });
  if (bias) KILN_CUDNN_CHECK(cudnnAddTensor(h, &s.one, ds.bias, bias, &s.one, ds.y, y), ds.what + " (bias)");
}

template <typename S>
void backward_input_pass(const Conv2dDesc& d, cudnnDataType_t cdt, bool nhwc, const void* dy, const void* w,
                         void* dx) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, cdt, nhwc, "conv2d_backward_input");
  Scalars<S> s;
  run_with_fallback(d, Dir::bwd_data, cdt, nhwc, dev, h, ds, Buffers{w, dy, dx}, [&](const Candidate& c, void* ws) {
    return cudnnConvolutionBackwardData(h, &s.one, ds.w, w, ds.y, dy, ds.conv, (cudnnConvolutionBwdDataAlgo_t)c.algo,
                                        ws, c.workspace, &s.zero, ds.x, dx);
  });
}

template <typename S>
void backward_weight_pass(const Conv2dDesc& d, cudnnDataType_t cdt, bool nhwc, const void* x, const void* dy,
                          void* dw, void* dbias) {
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev);
  Descs ds(d, cdt, nhwc, "conv2d_backward_weight");
  Scalars<S> s;
  run_with_fallback(d, Dir::bwd_filter, cdt, nhwc, dev, h, ds, Buffers{x, dy, dw}, [&](const Candidate& c, void* ws) {
    return cudnnConvolutionBackwardFilter(h, &s.one, ds.x, x, ds.y, dy, ds.conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)c.algo, ws, c.workspace, &s.zero, ds.w, dw);
  });
  if (dbias)
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &s.one, ds.y, dy, &s.zero, ds.bias, dbias), ds.what + " (bias)");
}

}  // namespace

template <typename T> constexpr DType kiln_dtype = std::is_same<T, double>::value ? DType::f64 : DType::f32;

// Under --kernels kiln the bias goes to kiln's bias kernels (bias.cu), not to cuDNN.
template <typename T>
void conv2d_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void*) {
  const bool kiln_bias = bias && bias_uses_kiln();
  forward_pass<T>(d, CudnnType<T>::value, false, x, w, kiln_bias ? nullptr : bias, y);
  if (kiln_bias) bias_add(kiln_dtype<T>, d.N, d.K, d.out_h() * d.out_w(), y, bias);
}

template <typename T>
void conv2d_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void*) {
  backward_input_pass<T>(d, CudnnType<T>::value, false, dy, w, dx);
}

template <typename T>
void conv2d_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, T* dbias, void*) {
  const bool kiln_bias = dbias && bias_uses_kiln();
  backward_weight_pass<T>(d, CudnnType<T>::value, false, x, dy, dw, kiln_bias ? nullptr : dbias);
  if (kiln_bias) bias_grad(kiln_dtype<T>, d.N, d.K, d.out_h() * d.out_w(), dy, dbias);
}

// ---- 16-bit (conv2d_16.h) ----
namespace {

cudnnDataType_t cudnn_16(DType dt, const char* op) {
  KILN_CHECK(dt == DType::f16 || dt == DType::bf16, op, ": dtype ", dtype_name(dt), " is not 16-bit");
  return dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

void cudnn_conv2d_16_forward(const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* w, void* y) {
  forward_pass<float>(d, cudnn_16(dt, "conv2d_forward"), nhwc, x, w, nullptr, y);
}

void cudnn_conv2d_16_backward_input(const Conv2dDesc& d, DType dt, bool nhwc, const void* dy, const void* w,
                                    void* dx) {
  backward_input_pass<float>(d, cudnn_16(dt, "conv2d_backward_input"), nhwc, dy, w, dx);
}

void cudnn_conv2d_16_backward_weight(const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* dy,
                                     void* dw) {
  backward_weight_pass<float>(d, cudnn_16(dt, "conv2d_backward_weight"), nhwc, x, dy, dw, nullptr);
}

}  // namespace

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
namespace {
void cudnn_conv2d_16_forward(const Conv2dDesc&, DType, bool, const void*, const void*, void*) {
  throw Error("conv2d_forward (16-bit) on cuda: kiln was built without cuDNN; use --kernels kiln");
}
void cudnn_conv2d_16_backward_input(const Conv2dDesc&, DType, bool, const void*, const void*, void*) {
  throw Error("conv2d_backward_input (16-bit) on cuda: kiln was built without cuDNN; use --kernels kiln");
}
void cudnn_conv2d_16_backward_weight(const Conv2dDesc&, DType, bool, const void*, const void*, void*) {
  throw Error("conv2d_backward_weight (16-bit) on cuda: kiln was built without cuDNN; use --kernels kiln");
}
}  // namespace

#endif

// kiln's implicit-GEMM path for f16 (NHWC only) or cuDNN.
bool conv2d_16_uses_kiln(const Conv2dDesc& d, DType dt) {
  return kernel_source() == KernelSource::kiln && dt == DType::f16 && d.groups == 1;
}

namespace {

void check_kiln_layout(const Conv2dDesc& d, ConvLayout layout, const char* op) {
  KILN_CHECK(layout == ConvLayout::nhwc, op, " x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, ") w (", d.K, ", ", d.C,
             ", ", d.R, ", ", d.S, "): kiln's implicit-GEMM convolution needs NHWC (channels-last) tensors");
}

}  // namespace

void conv2d_16_forward(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* x, const void* w, void* y) {
  if (!conv2d_16_uses_kiln(d, dt)) return cudnn_conv2d_16_forward(d, dt, layout == ConvLayout::nhwc, x, w, y);
  check_kiln_layout(d, layout, "conv2d_forward");
  igemm_conv_fprop(d, x, w, y, DType::f16, 1.0f, 0.0f, compute_stream(current_device()));
}

void conv2d_16_backward_input(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* dy, const void* w,
                              void* dx) {
  if (!conv2d_16_uses_kiln(d, dt))
    return cudnn_conv2d_16_backward_input(d, dt, layout == ConvLayout::nhwc, dy, w, dx);
  check_kiln_layout(d, layout, "conv2d_backward_input");
  igemm_conv_dgrad(d, dy, w, dx, DType::f16, 1.0f, 0.0f, compute_stream(current_device()));
}

void conv2d_16_backward_weight(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* x, const void* dy,
                               void* dw) {
  if (!conv2d_16_uses_kiln(d, dt))
    return cudnn_conv2d_16_backward_weight(d, dt, layout == ConvLayout::nhwc, x, dy, dw);
  check_kiln_layout(d, layout, "conv2d_backward_weight");
  const int dev = current_device();
  const size_t bytes = igemm_conv_workspace_bytes(d, ConvPass::wgrad);
  Workspace ws(dev, bytes);  // split-K partial sums
  igemm_conv_wgrad(d, dy, x, dw, DType::f16, 1.0f, 0.0f, ws.get(), bytes, compute_stream(dev));
}

#define KILN_INSTANTIATE_CONV(T)                                                                        \
  template void conv2d_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*);          \
  template void conv2d_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);             \
  template void conv2d_backward_weight<T>(const Conv2dDesc&, const T*, const T*, T*, T*, void*);
KILN_INSTANTIATE_CONV(float)
KILN_INSTANTIATE_CONV(double)
#undef KILN_INSTANTIATE_CONV

}  // namespace kiln::cuda
