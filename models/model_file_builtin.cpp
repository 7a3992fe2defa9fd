// Built-in models as model files (see model_file_builtin.h). The layouts mirror models/small_cnn.cpp
// and models/resnet.cpp (torchvision's BasicBlock and Bottleneck ResNets) and models/unet.h (its names; no
// modules are built); test_model_file.cpp checks both agree. The files keep PyTorch's order, relu then max
// pool, where small_cnn.cpp and resnet.cpp's stem run the relu after the pool (the same values: see there).
#include "models/model_file_builtin.h"

#include "engine/core/error.h"
#include "models/unet.h"

namespace kiln::models {

using nlohmann::json;

namespace {

json conv(const char* name, int64_t out, int64_t k, int64_t stride, int64_t pad, bool bias) {
  json j = {{"type", "conv2d"}, {"out_channels", out}, {"kernel", k}};
  if (name) j["name"] = name;
  if (stride != 1) j["stride"] = stride;
  if (pad != 0) j["padding"] = pad;
  if (!bias) j["bias"] = false;
  return j;
}

json layer(const char* name, const char* type) { return {{"name", name}, {"type", type}}; }

json small_cnn() {
  json l = json::array({conv("conv1", 32, 3, 1, 1, true), layer("bn1", "batch_norm"), layer("relu1", "relu"),
                        {{"name", "pool1"}, {"type", "max_pool"}, {"kernel", 2}},
                        conv("conv2", 64, 3, 1, 1, true), layer("bn2", "batch_norm"), layer("relu2", "relu"),
                        {{"name", "pool2"}, {"type", "max_pool"}, {"kernel", 2}}, layer("flatten", "flatten"),
                        {{"name", "fc1"}, {"type", "linear"}, {"out_features", 128}}, layer("relu3", "relu"),
                        {{"name", "dropout"}, {"type", "dropout"}, {"p", 0.25}},
                        {{"name", "fc2"}, {"type", "linear"}, {"out_features", "num_classes"}}});
  return {{"format", "kiln-model-1"},
          {"description", "small_cnn: two conv-bn-relu-maxpool blocks and two linear layers"},
          {"layers", l}};
}

// torchvision's BasicBlock: conv1 (3x3, stride), bn1, relu, conv2, bn2, [downsample], add, relu.
json basic_block(int64_t planes, int64_t stride, bool downsample) {
  json l = json::array({conv("conv1", planes, 3, stride, 1, false), layer("bn1", "batch_norm"), layer("relu", "relu"),
                        conv("conv2", planes, 3, 1, 1, false), layer("bn2", "batch_norm")});
  if (downsample)
    l.push_back({{"name", "downsample"},
                 {"type", "block"},
                 {"input", "input"},
                 {"layers", json::array({conv(nullptr, planes, 1, stride, 0, false), {{"type", "batch_norm"}}})}});
  l.push_back({{"name", "add"}, {"type", "add"}, {"inputs", {"bn2", downsample ? "downsample" : "input"}}});
  l.push_back(layer("relu2", "relu"));
  return l;
}

// torchvision's Bottleneck (models/bottleneck.h): conv1 (1x1), bn1, relu, conv2 (3x3, stride), bn2, relu,
// conv3 (1x1, 4 planes), bn3, [downsample], add, relu.
json bottleneck_block(int64_t planes, int64_t stride, bool downsample) {
  json l = json::array({conv("conv1", planes, 1, 1, 0, false), layer("bn1", "batch_norm"), layer("relu", "relu"),
                        conv("conv2", planes, 3, stride, 1, false), layer("bn2", "batch_norm"), layer("relu2", "relu"),
                        conv("conv3", planes * 4, 1, 1, 0, false), layer("bn3", "batch_norm")});
  if (downsample)
    l.push_back({{"name", "downsample"},
                 {"type", "block"},
                 {"input", "input"},
                 {"layers", json::array({conv(nullptr, planes * 4, 1, stride, 0, false), {{"type", "batch_norm"}}})}});
  l.push_back({{"name", "add"}, {"type", "add"}, {"inputs", {"bn3", downsample ? "downsample" : "input"}}});
  l.push_back(layer("relu3", "relu"));
  return l;
}

json resnet(const std::string& name, const std::vector<int64_t>& blocks, bool small_stem, bool bottleneck = false) {
  json l = json::array();
  l.push_back(small_stem ? conv("conv1", 64, 3, 1, 1, false) : conv("conv1", 64, 7, 2, 3, false));
  l.push_back(layer("bn1", "batch_norm"));
  l.push_back(layer("relu", "relu"));
  if (!small_stem) l.push_back({{"name", "maxpool"}, {"type", "max_pool"}, {"kernel", 3}, {"stride", 2}, {"padding", 1}});
  int64_t inplanes = 64;
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int i = 0; i < 4; ++i) {
    const std::string lname = "layer" + std::to_string(i + 1);
    const int64_t stride = i == 0 ? 1 : 2;
    const int64_t expansion = bottleneck ? 4 : 1;
    auto block = [&](int64_t st, bool d) {
      return bottleneck ? bottleneck_block(planes[i], st, d) : basic_block(planes[i], st, d);
    };
    const bool ds = stride != 1 || inplanes != planes[i] * expansion;
    int64_t start = 0;
    if (ds) {  // block 0 differs from the rest: written on its own
      l.push_back({{"name", lname + ".0"}, {"type", "block"}, {"layers", block(stride, true)}});
      start = 1;
    }
    if (blocks[(size_t)i] > start) {
      json r = {{"name", lname}, {"type", "repeat"}, {"count", blocks[(size_t)i] - start}};
      if (start) r["start"] = start;
      r["layers"] = block(1, false);
      l.push_back(r);
    }
    inplanes = planes[i] * expansion;
  }
  l.push_back({{"name", "avgpool"}, {"type", "adaptive_avg_pool"}, {"output_size", 1}});
  l.push_back(layer("flatten", "flatten"));
  l.push_back({{"name", "fc"}, {"type", "linear"}, {"out_features", "num_classes"}});
  return {{"format", "kiln-model-1"},
          {"description", name + ": torchvision's layout and parameter names" +
                              std::string(small_stem ? ", 3x3 stride-1 stem without max-pool" : "")},
          {"init", "kaiming_fan_out"},
          {"layers", l}};
}

}  // namespace

namespace {

// {"name": .., "type": .., other fields, "layers": [ (one per line, indented) ]}
void format_layer(const json& l, const std::string& indent, std::string& out) {
  out += indent + "{";
  bool first = true;
  auto field = [&](const std::string& k, const json& v) {
    out += (first ? "" : ", ") + json(k).dump() + ": " + v.dump();
    first = false;
  };
  for (const char* k : {"name", "type"})
    if (l.contains(k)) field(k, l[k]);
  for (auto it = l.begin(); it != l.end(); ++it)
    if (it.key() != "name" && it.key() != "type" && it.key() != "layers") field(it.key(), it.value());
  if (l.contains("layers") && l["layers"].is_array()) {
    out += std::string(first ? "" : ", ") + "\"layers\": [\n";
    for (size_t i = 0; i < l["layers"].size(); ++i) {
      format_layer(l["layers"][i], indent + "  ", out);
      out += i + 1 < l["layers"].size() ? ",\n" : "\n";
    }
    out += indent + "]";
  }
  out += "}";
}

// milesial's DoubleConv as a block named `name`: layers 0..5 = conv3x3 (no bias), BN, ReLU, x2.
json double_conv(const std::string& name, int64_t mid, int64_t out, int64_t first_stride) {
  json l = json::array({conv("0", mid, 3, first_stride, 1, false), layer("1", "batch_norm"), layer("2", "relu"),
                        conv("3", out, 3, 1, 1, false), layer("4", "batch_norm"), layer("5", "relu")});
  return {{"name", name}, {"type", "block"}, {"layers", l}};
}

// models/unet.h's UNet with the same names. The Ups concat without padding, so this form takes sizes
// divisible by 2^depth (x2 with stride2) only; the stride-2 variant ends in a bilinear x2 upsample
// (F.interpolate with scale 2 equals kiln's resize to H x W there).
json unet_json(const std::string& name) {
  const UNetOptions o = unet_options_from_name(name);
  KILN_CHECK(o.depth >= 1 && o.depth <= 8 && o.base_width >= 2, "model '", name, "': bad depth or base width");
  const int64_t D = o.depth, f = o.bilinear ? 2 : 1;
  auto w = [&](int64_t i) { return o.base_width << i; };
  json l = json::array({double_conv("inc.double_conv", w(0), w(0), o.first_stride)});
  std::vector<std::string> skips = {"inc.double_conv"};
  for (int64_t i = 1; i <= D; ++i) {
    const int64_t out = i == D ? w(i) / f : w(i);
    const std::string n = "down" + std::to_string(i) + ".maxpool_conv";
    l.push_back({{"name", n},
                 {"type", "block"},
                 {"layers", json::array({{{"name", "0"}, {"type", "max_pool"}, {"kernel", 2}},
                                         double_conv("1.double_conv", out, out, 1)})}});
    skips.push_back(n);
  }
  for (int64_t j = 1; j <= D; ++j) {
    const int64_t in = w(D - j + 1), out = j == D ? w(0) : w(D - j) / f;
    const std::string p = "up" + std::to_string(j);
    if (o.bilinear)
      l.push_back({{"name", p + ".up"}, {"type", "upsample"}, {"scale_factor", 2}, {"mode", "bilinear"},
                   {"align_corners", true}});
    else
      l.push_back({{"name", p + ".up"}, {"type", "conv_transpose2d"}, {"out_channels", in / 2}, {"kernel", 2},
                   {"stride", 2}});
    l.push_back({{"name", p + ".cat"}, {"type", "concat"}, {"inputs", {skips[(size_t)(D - j)], p + ".up"}}});
    l.push_back(double_conv(p + ".conv.double_conv", o.bilinear ? in / 2 : out, out, 1));
  }
  l.push_back({{"name", "outc.conv"}, {"type", "conv2d"}, {"out_channels", "num_classes"}, {"kernel", 1}});
  if (o.first_stride == 2)
    l.push_back({{"name", "resize"}, {"type", "upsample"}, {"scale_factor", 2}, {"mode", "bilinear"}});
  return {{"format", "kiln-model-1"},
          {"description", name + ": UNet (milesial/Pytorch-UNet layout), depth " + std::to_string(D) + ", base width " +
                              std::to_string(o.base_width) + (o.bilinear ? ", bilinear" : ", transposed conv") +
                              (o.first_stride == 2 ? ", stride-2 first conv" : "") +
                              "; sizes divisible by 2^depth" + (o.first_stride == 2 ? " x 2" : "")},
          {"layers", l}};
}

}  // namespace

std::string format_model_json(const json& doc) {
  if (!doc.is_object() || !doc.contains("layers") || !doc["layers"].is_array()) return doc.dump(2) + "\n";
  std::string out = "{\n";
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "layers") out += "  " + json(it.key()).dump() + ": " + it.value().dump() + ",\n";
  out += "  \"layers\": [\n";
  for (size_t i = 0; i < doc["layers"].size(); ++i) {
    format_layer(doc["layers"][i], "    ", out);
    out += i + 1 < doc["layers"].size() ? ",\n" : "\n";
  }
  return out + "  ]\n}\n";
}

json builtin_model_json(const std::string& name) {
  if (name == "small_cnn") return small_cnn();
  if (name == "resnet18") return resnet(name, {2, 2, 2, 2}, false);
  if (name == "resnet34") return resnet(name, {3, 4, 6, 3}, false);
  if (name == "resnet18_small") return resnet(name, {2, 2, 2, 2}, true);
  if (name == "resnet34_small") return resnet(name, {3, 4, 6, 3}, true);
  if (name == "resnet50") return resnet(name, {3, 4, 6, 3}, false, true);
  if (name == "resnet101") return resnet(name, {3, 4, 23, 3}, false, true);
  if (name == "resnet50_small") return resnet(name, {3, 4, 6, 3}, true, true);
  if (name == "resnet101_small") return resnet(name, {3, 4, 23, 3}, true, true);
  const std::string base = name.substr(0, name.find(':'));
  if (base == "unet" || base == "unet_small") return unet_json(name);
  throw Error(str_cat("no model file form for '", name, "' (built-in models with one: small_cnn, resnet18, resnet34, "
                      "resnet50, resnet101 and their _small forms, unet[:opts], unet_small[:opts])"));
}

}  // namespace kiln::models
