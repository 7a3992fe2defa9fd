// ONNX exporters of models/unet.h: DoubleConv, Down and OutConv through their Sequential / Conv2d
// children; the UNet as inc, down1..downD, then per Up: its `up` (ConvTranspose or Resize), a Pad
// (zeros, as kiln's pad) when the upsampled map is smaller than the skip, Concat([skip, up], axis 1)
// and its DoubleConv; then outc, and with the stride-2 first conv a bilinear Resize (half_pixel, as
// F.interpolate with align_corners false) to the input's H x W. The pads and the final size are fixed
// at the export's image size (the batch dimension stays symbolic).
#include "engine/export/onnx_exporters.h"
#include "models/unet.h"

namespace kiln::onnx_export {

OnnxValue export_unet_double_conv(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& d = module_as<models::DoubleConv>(m, path);
  return g.module(*d.double_conv, join_path(path, "double_conv"), x);
}

OnnxValue export_unet_down(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& d = module_as<models::UNetDown>(m, path);
  return g.module(*d.maxpool_conv, join_path(path, "maxpool_conv"), x);
}

OnnxValue export_unet_out_conv(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& o = module_as<models::UNetOutConv>(m, path);
  return g.module(*o.conv, join_path(path, "conv"), x);
}

OnnxValue export_unet(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& u = module_as<models::UNet>(m, path);
  KILN_CHECK(x.shape.size() == 4, "ONNX export: UNet '", path, "' expects (N, C, H, W), got ", shape_str(x.shape));
  const int64_t D = u.options().depth;
  std::vector<OnnxValue> skips{g.module(*u.child("inc"), join_path(path, "inc"), x)};
  for (int64_t i = 1; i <= D; ++i) {
    const std::string n = "down" + std::to_string(i);
    skips.push_back(g.module(*u.child(n), join_path(path, n), skips.back()));
  }
  OnnxValue y = skips.back();
  for (int64_t j = 1; j <= D; ++j) {
    const std::string n = "up" + std::to_string(j), p = join_path(path, n);
    auto& up = module_as<models::UNetUp>(*u.child(n), p);
    const OnnxValue& skip = skips[(size_t)(D - j)];
    OnnxValue a = g.module(*up.up, join_path(p, "up"), y);
    const int64_t dy = skip.shape[2] - a.shape[2], dx = skip.shape[3] - a.shape[3];
    KILN_CHECK(dy >= 0 && dx >= 0, "ONNX export: UNet '", p, "': upsampled ", shape_str(a.shape),
               " is larger than the skip ", shape_str(skip.shape));
    if (dy > 0 || dx > 0) {
      // ONNX pads: all begins (N, C, H, W), then all ends; kiln's (left, right, top, bottom) split.
      const std::string pads =
          g.constant_i64(join_path(p, "pads"), {0, 0, dy / 2, dx / 2, 0, 0, dy - dy / 2, dx - dx / 2});
      a = g.node(join_path(p, "pad"), "Pad", {a.name, pads}, {OnnxAttr::str("mode", "constant")},
                 Shape{a.shape[0], a.shape[1], skip.shape[2], skip.shape[3]});
    }
    const OnnxValue c = g.node(join_path(p, "cat"), "Concat", {skip.name, a.name}, {OnnxAttr::integer("axis", 1)},
                               Shape{skip.shape[0], skip.shape[1] + a.shape[1], skip.shape[2], skip.shape[3]});
    y = g.module(*up.conv, join_path(p, "conv"), c);
  }
  OnnxValue logits = g.module(*u.child("outc"), join_path(path, "outc"), y);
  if (logits.shape[2] == x.shape[2] && logits.shape[3] == x.shape[3]) return logits;
  // The stride-2 first conv: bilinear back to the input's H x W. sizes = concat(Shape(logits)[0:2], [H, W]).
  const std::string p = join_path(path, "resize");
  const OnnxValue shape = g.node(join_path(p, "shape"), "Shape", {logits.name}, {}, Shape{4});
  const OnnxValue nc = g.node(join_path(p, "batch_channels"), "Slice",
                              {shape.name, g.constant_i64(join_path(p, "starts"), {0}),
                               g.constant_i64(join_path(p, "ends"), {2}), g.constant_i64(join_path(p, "axes"), {0})},
                              {}, Shape{2});
  const OnnxValue sizes =
      g.node(join_path(p, "sizes"), "Concat", {nc.name, g.constant_i64(join_path(p, "hw"), {x.shape[2], x.shape[3]})},
             {OnnxAttr::integer("axis", 0)}, Shape{4});
  return g.node(p, "Resize", {logits.name, "", "", sizes.name},
                {OnnxAttr::str("mode", "linear"), OnnxAttr::str("coordinate_transformation_mode", "half_pixel")},
                Shape{logits.shape[0], logits.shape[1], x.shape[2], x.shape[3]});
}

}  // namespace kiln::onnx_export
