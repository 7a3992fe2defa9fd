// The cuDNN descriptor arguments of kernels/cuda/conv2d.cpp (kernels/cuda/cudnn_args.h) on the CPU:
// the tensor / filter dims with the strides cuDNN derives from their format must be the sizes and
// strides of the tensors kiln hands it (kiln's own CPU conv2d output, NCHW and channels-last), the
// convolution descriptor carries the call's geometry, and the workspace limit keeps exactly the
// candidates within it. No cuDNN runs here; this tests the arithmetic, not the library.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/tensor/memory_format.h"
#include "kernels/cuda/cudnn_args.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

Shape dims_shape(const CudnnDims& d) { return {d.n, d.c, d.h, d.w}; }
Shape strides_shape(const std::array<int64_t, 4>& s) { return {s[0], s[1], s[2], s[3]}; }

// The same memory layout: equal strides in every dim of size > 1 (a size-1 dim's stride is never
// used to address anything; kiln keeps a (K, C, 1, 1) weight's contiguous strides when asked for
// channels-last, since it already is).
bool same_layout(const std::array<int64_t, 4>& cudnn, const Tensor& t) {
  for (int i = 0; i < 4; ++i)
    if (t.sizes()[i] > 1 && cudnn[i] != t.strides()[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("cuDNN descriptors: dims and format strides are the tensors kiln passes, NCHW and NHWC") {
  struct G {
    int64_t N, C, H, W, K, R, S, stride, pad, dil, groups;
  };
  const G cases[] = {{2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1}, {1, 4, 9, 6, 6, 3, 2, 2, 0, 1, 2},
                     {3, 2, 8, 8, 5, 3, 3, 1, 2, 2, 1}, {2, 6, 5, 7, 6, 1, 1, 3, 0, 1, 3}};
  for (const G& g : cases)
    for (bool nhwc : {false, true}) {
      CAPTURE(nhwc);
      CAPTURE(g.groups);
      const MemoryFormat fmt = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      Conv2dDesc d;
      d.N = g.N, d.C = g.C, d.H = g.H, d.W = g.W, d.K = g.K, d.R = g.R, d.S = g.S;
      d.stride_h = d.stride_w = g.stride, d.pad_h = d.pad_w = g.pad, d.dil_h = d.dil_w = g.dil, d.groups = g.groups;
      REQUIRE(std::string(cudnn_conv_invalid(d)).empty());
      const CudnnConvArgs a = cudnn_conv_args(d, CudnnData::f32, nhwc, false);
      CHECK(a.layout == (nhwc ? CudnnLayout::nhwc : CudnnLayout::nchw));
      // kiln's own tensors of this call, in the layout the CUDA path keeps (conv2d on the CPU keeps
      // channels-last too): x, w (KCRS or KRSC) and the output y.
      Tensor x = contiguous(randn({g.N, g.C, g.H, g.W}), fmt);
      Tensor w = contiguous(randn({g.K, g.C / g.groups, g.R, g.S}), fmt);
      Tensor y = conv2d(x, w, Tensor(), {g.stride, g.stride}, {g.pad, g.pad}, {g.dil, g.dil}, g.groups);
      CHECK(dims_shape(a.x) == x.sizes());
      CHECK(same_layout(cudnn_packed_strides(a.x, a.layout), x));
      CHECK(dims_shape(a.w) == w.sizes());
      CHECK(same_layout(cudnn_packed_strides(a.w, a.layout), w));
      CHECK(dims_shape(a.y) == y.sizes());
      // The output's buffer is dense in the same format (what the CUDA path allocates for y).
      CHECK(strides_shape(cudnn_packed_strides(a.y, a.layout)) == strides_for(y.sizes(), fmt));
      CHECK(dims_shape(a.bias) == Shape{1, g.K, 1, 1});
      CHECK(strides_shape(cudnn_packed_strides(a.bias, CudnnLayout::nchw)) == Shape{g.K, 1, 1, 1});
      CHECK((a.pad_h == g.pad && a.pad_w == g.pad && a.stride_h == g.stride && a.stride_w == g.stride &&
             a.dil_h == g.dil && a.dil_w == g.dil && a.groups == g.groups));
    }
}

TEST_CASE("cuDNN descriptors: compute type and math type per dtype, invalid shapes named") {
  Conv2dDesc d;
  d.N = 2, d.C = 4, d.H = 5, d.W = 5, d.K = 8, d.R = 3, d.S = 3;
  CHECK(cudnn_conv_args(d, CudnnData::f32, false, false).math == CudnnMath::fma);
  CHECK(cudnn_conv_args(d, CudnnData::f32, false, true).math == CudnnMath::default_math);
  CHECK(cudnn_conv_args(d, CudnnData::f32, false, true).compute == CudnnData::f32);
  CHECK(cudnn_conv_args(d, CudnnData::f64, false, true).math == CudnnMath::fma);
  CHECK(cudnn_conv_args(d, CudnnData::f64, false, false).compute == CudnnData::f64);
  for (CudnnData h : {CudnnData::f16, CudnnData::bf16})
    for (bool nhwc : {false, true}) {
      const CudnnConvArgs a = cudnn_conv_args(d, h, nhwc, false);
      CHECK(a.compute == CudnnData::f32);
      CHECK(a.math == CudnnMath::tensor_op);
      CHECK(a.data == h);
    }
  Conv2dDesc bad = d;
  bad.groups = 3;  // 4 channels do not split into 3 groups
  CHECK(std::string(cudnn_conv_invalid(bad)) == "invalid convolution");
  bad = d;
  bad.H = 1;  // a 3x3 window without padding does not fit
  CHECK(std::string(cudnn_conv_invalid(bad)) == "invalid convolution");
  bad = d;
  bad.W = (int64_t)1 << 31;
  CHECK(std::string(cudnn_conv_invalid(bad)) == "a size exceeds cuDNN's 32-bit limit");
}

TEST_CASE("cuDNN workspace: the limit keeps the candidates within it, in order, and names the smallest need") {
  const std::vector<size_t> need = {300, 0, 1000, 256, 257};
  CHECK(candidates_within_workspace(need, 256, "conv") == std::vector<size_t>{1, 3});
  CHECK(candidates_within_workspace(need, 1000, "conv") == std::vector<size_t>{0, 1, 2, 3, 4});
  CHECK(candidates_within_workspace(need, 0, "conv") == std::vector<size_t>{1});
  CHECK_THROWS_WITH(candidates_within_workspace({300, 400}, 299, "conv2d_forward x (1, 2, 3, 4)"),
                    doctest::Contains("conv2d_forward x (1, 2, 3, 4): every cuDNN algorithm needs more workspace "
                                      "than kiln's limit of 299 bytes (the smallest needs 300)"));
  CHECK(find_workspace_bytes({}) == 0);
  CHECK(find_workspace_bytes({5, 700, 3}) == 700);
}
