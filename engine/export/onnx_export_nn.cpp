// ONNX exporters of engine/nn's layers (one function per module type; the table is onnx_exporters.cpp).
//   Conv2d -> Conv, BatchNorm2d -> BatchNormalization (running statistics), Linear -> Gemm (transB),
//   ReLU -> Relu, MaxPool2d -> MaxPool, AdaptiveAvgPool2d -> GlobalAveragePool (or AveragePool when the
//   input divides evenly), Flatten -> Flatten, Dropout / Identity -> no node, Sequential -> its children,
//   ConvTranspose2d -> ConvTranspose, Upsample -> Resize (torch 1.13's index rules, see export_upsample).
// Every attribute is written explicitly (no reliance on ONNX defaults that differ from kiln's).
#include "engine/export/onnx_exporters.h"

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/nn/upsampling.h"
#include "engine/ops/ops.h"

namespace kiln::onnx_export {

namespace {
// The output shape of module m's own forward on x (a leaf module: one cheap batch-1 run).
Shape leaf_shape(OnnxGraph& g, nn::Module& m, const OnnxValue& x) {
  return g.probe(x, [&](const Tensor& t) { return m.forward(t); });
}
}  // namespace

OnnxValue export_conv2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& c = module_as<nn::Conv2d>(m, path);
  const nn::Conv2dOptions& o = c.options();
  // weight: (out, in/groups, kh, kw)
  std::vector<std::string> in = {x.name, g.initializer(join_path(path, "weight"), c.weight)};
  if (c.bias.defined()) in.push_back(g.initializer(join_path(path, "bias"), c.bias));
  return g.node(path, "Conv", in,
                {OnnxAttr::ints("kernel_shape", {c.weight.size(2), c.weight.size(3)}),
                 OnnxAttr::ints("strides", {o.stride, o.stride}),
                 OnnxAttr::ints("pads", {o.padding, o.padding, o.padding, o.padding}),
                 OnnxAttr::ints("dilations", {o.dilation, o.dilation}), OnnxAttr::integer("group", o.groups)},
                leaf_shape(g, m, x));
}

OnnxValue export_conv_transpose2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& c = module_as<nn::ConvTranspose2d>(m, path);
  const nn::ConvTranspose2dOptions& o = c.options();
  // weight: (in, out/groups, kh, kw), ONNX's ConvTranspose layout as well.
  std::vector<std::string> in = {x.name, g.initializer(join_path(path, "weight"), c.weight)};
  if (c.bias.defined()) in.push_back(g.initializer(join_path(path, "bias"), c.bias));
  // Output size from pads and output_padding (no output_shape attribute: ONNX then derives the pads).
  return g.node(path, "ConvTranspose", in,
                {OnnxAttr::ints("kernel_shape", {c.weight.size(2), c.weight.size(3)}),
                 OnnxAttr::ints("strides", {o.stride, o.stride}),
                 OnnxAttr::ints("pads", {o.padding, o.padding, o.padding, o.padding}),
                 OnnxAttr::ints("output_padding", {o.output_padding, o.output_padding}),
                 OnnxAttr::ints("dilations", {o.dilation, o.dilation}), OnnxAttr::integer("group", o.groups)},
                leaf_shape(g, m, x));
}

// F.interpolate as Resize. torch 1.13 maps output index d to a source coordinate with the user's scale
// factor when one is given (not in/out), else with in/out:
//   nearest: floor(d / scale)                 = Resize asymmetric + nearest_mode floor
//   bilinear, align_corners false: (d + 0.5) / scale - 0.5, clamped at 0 = half_pixel
//   bilinear, align_corners true: d (in - 1) / (out - 1)                 = align_corners
// So a scale factor goes in as Resize's `scales` (ONNX's output size is floor(in * scale), as torch's),
// and a size as `sizes` (ONNX then uses out/in, as torch does): (N, C) from Shape(x), (H', W') constant.
OnnxValue export_upsample(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& u = module_as<nn::Upsample>(m, path);
  const nn::UpsampleOptions& o = u.options();
  KILN_CHECK(x.shape.size() == 4, "ONNX export: Upsample '", path, "' expects (N, C, H, W), got ", shape_str(x.shape));
  const Shape out = leaf_shape(g, m, x);
  std::vector<OnnxAttr> attrs;
  if (o.mode == InterpMode::nearest) {
    attrs = {OnnxAttr::str("mode", "nearest"), OnnxAttr::str("coordinate_transformation_mode", "asymmetric"),
             OnnxAttr::str("nearest_mode", "floor")};
  } else {
    attrs = {OnnxAttr::str("mode", "linear"),
             OnnxAttr::str("coordinate_transformation_mode", o.align_corners ? "align_corners" : "half_pixel")};
  }
  const std::string roi = "";  // unused by these modes (tf_crop_and_resize only)
  if (!o.scale_factor.empty()) {
    const double sh = o.scale_factor[0], sw = o.scale_factor.size() > 1 ? o.scale_factor[1] : sh;
    const std::string scales = g.constant_f32(join_path(path, "scales"), {1.0f, 1.0f, (float)sh, (float)sw});
    return g.node(path, "Resize", {x.name, roi, scales}, attrs, out);
  }
  // sizes = concat(Shape(x)[0:2], [H', W'])
  const OnnxValue shape = g.node(join_path(path, "shape"), "Shape", {x.name}, {}, Shape{4});
  const OnnxValue nc = g.node(join_path(path, "batch_channels"), "Slice",
                              {shape.name, g.constant_i64(join_path(path, "starts"), {0}),
                               g.constant_i64(join_path(path, "ends"), {2}),
                               g.constant_i64(join_path(path, "axes"), {0})},
                              {}, Shape{2});
  const OnnxValue sizes =
      g.node(join_path(path, "sizes"), "Concat", {nc.name, g.constant_i64(join_path(path, "hw"), {out[2], out[3]})},
             {OnnxAttr::integer("axis", 0)}, Shape{4});
  return g.node(path, "Resize", {x.name, roi, "", sizes.name}, attrs, out);
}

OnnxValue export_batch_norm2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& b = module_as<nn::BatchNorm2d>(m, path);
  // Inference form: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel.
  std::vector<std::string> in = {x.name, g.initializer(join_path(path, "weight"), b.weight),
                                 g.initializer(join_path(path, "bias"), b.bias),
                                 g.initializer(join_path(path, "running_mean"), b.running_mean),
                                 g.initializer(join_path(path, "running_var"), b.running_var)};
  return g.node(path, "BatchNormalization", in,
                {OnnxAttr::real("epsilon", (float)b.eps()), OnnxAttr::real("momentum", (float)(1.0 - b.momentum()))},
                x.shape);
}

OnnxValue export_linear(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& l = module_as<nn::Linear>(m, path);
  KILN_CHECK(x.shape.size() == 2, "ONNX export: Linear '", path, "' gets a rank-", x.shape.size(), " input ",
             shape_str(x.shape), "; export supports (N, in) inputs only (Gemm)");
  // y = x W^T + b: Gemm(A = x (N, in), B = weight (out, in), C = bias (out)), transB = 1.
  std::vector<std::string> in = {x.name, g.initializer(join_path(path, "weight"), l.weight)};
  if (l.bias.defined()) in.push_back(g.initializer(join_path(path, "bias"), l.bias));
  return g.node(path, "Gemm", in,
                {OnnxAttr::real("alpha", 1.0f), OnnxAttr::real("beta", 1.0f), OnnxAttr::integer("transA", 0),
                 OnnxAttr::integer("transB", 1)},
                leaf_shape(g, m, x));
}

OnnxValue export_relu(OnnxGraph& g, nn::Module&, const std::string& path, const OnnxValue& x) {
  return relu_node(g, path, x);
}

OnnxValue export_max_pool2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& p = module_as<nn::MaxPool2d>(m, path);
  return max_pool_node(g, path, x, p.kernel(), p.stride(), p.padding());
}

OnnxValue export_adaptive_avg_pool2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& p = module_as<nn::AdaptiveAvgPool2d>(m, path);
  KILN_CHECK(x.shape.size() == 4, "ONNX export: AdaptiveAvgPool2d '", path, "' expects (N, C, H, W), got ",
             shape_str(x.shape));
  const Shape out = leaf_shape(g, m, x);
  if (p.out_h() == 1 && p.out_w() == 1) return g.node(path, "GlobalAveragePool", {x.name}, {}, out);
  const int64_t h = x.shape[2], w = x.shape[3];
  // Adaptive pooling with equal windows is a plain average pool; uneven windows have no ONNX op.
  KILN_CHECK(h % p.out_h() == 0 && w % p.out_w() == 0, "ONNX export: AdaptiveAvgPool2d '", path, "' from ", h, "x", w,
             " to ", p.out_h(), "x", p.out_w(), " has uneven windows (no ONNX op); export at an image size that ",
             "divides evenly");
  const int64_t kh = h / p.out_h(), kw = w / p.out_w();
  return g.node(path, "AveragePool", {x.name},
                {OnnxAttr::ints("kernel_shape", {kh, kw}), OnnxAttr::ints("strides", {kh, kw}),
                 OnnxAttr::ints("pads", {0, 0, 0, 0}), OnnxAttr::integer("ceil_mode", 0),
                 OnnxAttr::integer("count_include_pad", 0)},
                out);
}

OnnxValue export_flatten(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& f = module_as<nn::Flatten>(m, path);
  const int64_t rank = (int64_t)x.shape.size();
  const int64_t end = f.end_dim() < 0 ? f.end_dim() + rank : f.end_dim();
  KILN_CHECK(f.start_dim() == 1 && end == rank - 1, "ONNX export: Flatten '", path, "' (start_dim ", f.start_dim(),
             ", end_dim ", f.end_dim(), ") on ", shape_str(x.shape),
             ": export supports flattening every dimension after the batch only");
  return flatten_node(g, path, x);
}

OnnxValue export_identity(OnnxGraph&, nn::Module&, const std::string&, const OnnxValue& x) { return x; }

OnnxValue export_sequential(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  OnnxValue y = x;
  for (const auto& [name, child] : m.children()) y = g.module(*child, join_path(path, name), y);
  return y;
}

// ---- helpers ----
OnnxValue relu_node(OnnxGraph& g, const std::string& path, const OnnxValue& x) {
  return g.node(path, "Relu", {x.name}, {}, x.shape);
}

OnnxValue max_pool_node(OnnxGraph& g, const std::string& path, const OnnxValue& x, int64_t kernel, int64_t stride,
                        int64_t padding) {
  // kiln's max_pool2d: floor output size, padded cells never win (as ONNX MaxPool with ceil_mode 0).
  const Shape out =
      g.probe(x, [&](const Tensor& t) { return max_pool2d(t, {kernel, kernel}, {stride, stride}, {padding, padding}); });
  return g.node(path, "MaxPool", {x.name},
                {OnnxAttr::ints("kernel_shape", {kernel, kernel}), OnnxAttr::ints("strides", {stride, stride}),
                 OnnxAttr::ints("pads", {padding, padding, padding, padding}), OnnxAttr::integer("ceil_mode", 0)},
                out);
}

OnnxValue flatten_node(OnnxGraph& g, const std::string& path, const OnnxValue& x) {
  const Shape out = g.probe(x, [](const Tensor& t) { return flatten(t, 1); });
  return g.node(path, "Flatten", {x.name}, {OnnxAttr::integer("axis", 1)}, out);
}

OnnxValue add_node(OnnxGraph& g, const std::string& path, const OnnxValue& a, const OnnxValue& b) {
  KILN_CHECK(a.shape == b.shape, "ONNX export: '", path, "' adds ", shape_str(a.shape), " and ", shape_str(b.shape));
  return g.node(path, "Add", {a.name, b.name}, {}, a.shape);
}

}  // namespace kiln::onnx_export
