// ONNX exporters of models/' blocks and networks: each repeats its module's forward() as nodes, in the
// same order, through its children's exporters (so a child type without an exporter is named in the
// error). A network whose children are not the ones its exporter knows is an error, not a silent gap.
// Model files: a GraphModel is exported step by step in its run order (GraphModel::steps()), and the
// parameter-free op layers of model files (models::OpLayer) from the settings they keep (attrs()).
#include <cmath>
#include <map>
#include <set>

#include "engine/export/onnx_exporters.h"
#include "kernels/common/nn_desc.h"
#include "models/model_file.h"
#include "models/model_file_layers.h"
#include "models/bottleneck.h"
#include "models/resnet.h"
#include "models/small_cnn.h"

namespace kiln::onnx_export {

namespace {
// Every child of m must be one the exporter uses.
void check_children(nn::Module& m, const std::string& path, const std::set<std::string>& known) {
  for (const auto& kv : m.children())
    KILN_CHECK(known.count(kv.first), "ONNX export: ", m.type_name(), " '", path, "' has a child '", kv.first, "' (",
               kv.second->type_name(), ") that its exporter does not know");
}
}  // namespace

// relu(bn1(conv1(x))) -> bn2(conv2(.)) + (downsample(x) or x) -> relu
OnnxValue export_basic_block(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& b = module_as<models::BasicBlock>(m, path);
  check_children(m, path, {"conv1", "bn1", "relu", "conv2", "bn2", "downsample"});
  OnnxValue y = g.module(*b.conv1, join_path(path, "conv1"), x);
  y = g.module(*b.bn1, join_path(path, "bn1"), y);
  y = g.module(*b.relu, join_path(path, "relu"), y);
  y = g.module(*b.conv2, join_path(path, "conv2"), y);
  y = g.module(*b.bn2, join_path(path, "bn2"), y);
  const OnnxValue identity = b.downsample ? g.module(*b.downsample, join_path(path, "downsample"), x) : x;
  y = add_node(g, join_path(path, "add"), y, identity);
  return g.module(*b.relu, join_path(path, "relu"), y);
}

// torchvision's Bottleneck: relu(bn1(conv1)), relu(bn2(conv2)), bn3(conv3), + identity or downsample, relu
OnnxValue export_bottleneck(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& b = module_as<models::Bottleneck>(m, path);
  check_children(m, path, {"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "relu", "downsample"});
  auto run = [&](nn::Module& c, const char* name, const OnnxValue& v) { return g.module(c, join_path(path, name), v); };
  OnnxValue y = run(*b.relu, "relu", run(*b.bn1, "bn1", run(*b.conv1, "conv1", x)));
  y = run(*b.relu, "relu", run(*b.bn2, "bn2", run(*b.conv2, "conv2", y)));
  y = run(*b.bn3, "bn3", run(*b.conv3, "conv3", y));
  const OnnxValue identity = b.downsample ? run(*b.downsample, "downsample", x) : x;
  y = add_node(g, join_path(path, "add"), y, identity);
  return run(*b.relu, "relu", y);
}

// conv1, bn1, relu, [maxpool], layer1..layer4, avgpool, flatten, fc
OnnxValue export_resnet(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  check_children(m, path,
                 {"conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"});
  auto run = [&](const std::string& name, const OnnxValue& v) { return g.module(*m.child(name), join_path(path, name), v); };
  OnnxValue y = run("relu", run("bn1", run("conv1", x)));
  for (const auto& kv : m.children())
    if (kv.first == "maxpool") y = run("maxpool", y);
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) y = run(layer, y);
  y = run("avgpool", y);
  y = flatten_node(g, join_path(path, "flatten"), y);
  return run("fc", y);
}

// maxpool2(relu(bn1(conv1(x)))), maxpool2(relu(bn2(conv2(.)))), flatten, relu(fc1(.)), [dropout], fc2
OnnxValue export_small_cnn(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& s = module_as<models::SmallCNN>(m, path);
  check_children(m, path, {"conv1", "bn1", "conv2", "bn2", "fc1", "fc2", "dropout"});
  OnnxValue y = g.module(*s.bn1, join_path(path, "bn1"), g.module(*s.conv1, join_path(path, "conv1"), x));
  y = max_pool_node(g, join_path(path, "pool1"), relu_node(g, join_path(path, "relu1"), y), 2, 2, 0);
  y = g.module(*s.bn2, join_path(path, "bn2"), g.module(*s.conv2, join_path(path, "conv2"), y));
  y = max_pool_node(g, join_path(path, "pool2"), relu_node(g, join_path(path, "relu2"), y), 2, 2, 0);
  y = flatten_node(g, join_path(path, "flatten"), y);
  y = relu_node(g, join_path(path, "relu3"), g.module(*s.fc1, join_path(path, "fc1"), y));
  y = g.module(*s.dropout, join_path(path, "dropout"), y);
  return g.module(*s.fc2, join_path(path, "fc2"), y);
}

// Every layer in run order: a module through its exporter (so a layer type without one is named with its
// path), add -> Add, concat -> Concat(axis 1). The last step is the output.
OnnxValue export_graph_model(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto& gm = module_as<models::GraphModel>(m, path);
  std::map<std::string, OnnxValue> values = {{"input", x}};
  OnnxValue y = x;
  for (const models::GraphStep& st : gm.steps()) {
    const std::string p = join_path(path, st.name);
    std::vector<OnnxValue> in;
    for (const std::string& name : st.inputs) {
      auto it = values.find(name);
      KILN_CHECK(it != values.end(), "ONNX export: layer '", p, "' (", st.type, ") reads '", name,
                 "', which has not run yet");
      in.push_back(it->second);
    }
    if (st.module) {
      KILN_CHECK(in.size() == 1, "ONNX export: layer '", p, "' (", st.type, ") has ", in.size(), " inputs");
      y = g.module(*st.module, p, in[0]);
    } else if (st.type == "add") {
      y = in[0];
      for (size_t i = 1; i < in.size(); ++i) y = add_node(g, i + 1 < in.size() ? p + "_" + std::to_string(i) : p, y, in[i]);
    } else if (st.type == "concat") {
      std::vector<std::string> names;
      Shape out = in[0].shape;
      for (size_t i = 0; i < in.size(); ++i) {
        names.push_back(in[i].name);
        if (i) out[1] += in[i].shape[1];
      }
      y = g.node(p, "Concat", names, {OnnxAttr::integer("axis", 1)}, out);
    } else {
      throw Error(str_cat("ONNX export: layer '", p, "' of type ", st.type, " joins its inputs in a way export does not know"));
    }
    values[st.name] = y;
  }
  return y;
}

namespace {
// A scalar f32 constant (shape (1), broadcast by the elementwise ops).
std::string scalar(OnnxGraph& g, const std::string& path, const char* name, float v) {
  return g.constant_f32(join_path(path, name), {v});
}

// The pool output size ONNX computes (no torch rule dropping a last window that starts in the padding),
// which must equal kiln's for the node to mean the same thing.
int64_t onnx_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1;
  return (ceil_mode ? (num + s - 1) / s : num / s) + 1;
}

OnnxValue pool_op_layer(OnnxGraph& g, models::OpLayer& l, const std::string& path, const OnnxValue& x, bool is_max) {
  const nlohmann::json& a = l.attrs();
  KILN_CHECK(x.shape.size() == 4, "ONNX export: ", l.type_name(), " '", path, "' expects (N, C, H, W), got ",
             shape_str(x.shape));
  const int64_t k = a.at("kernel").get<int64_t>(), s = a.at("stride").get<int64_t>(), p = a.at("padding").get<int64_t>();
  const int64_t d = is_max ? a.at("dilation").get<int64_t>() : 1;
  const bool ceil_mode = a.at("ceil_mode").get<bool>();
  const Shape out = g.probe(x, [&](const Tensor& t) { return l.forward(t); });
  // ceil_mode: exported only where the last window lies inside the padded input in both conventions
  // (then torch's and ONNX's sizes and averages agree); else one error naming the layer.
  for (int dim = 2; dim < 4; ++dim) {
    const int64_t in = x.shape[(size_t)dim];
    KILN_CHECK(onnx_pool_out(in, k, s, p, d, ceil_mode) == out[(size_t)dim] &&
                   (!ceil_mode || onnx_pool_out(in, k, s, p, d, false) == out[(size_t)dim]),
               "ONNX export: ", l.type_name(), " '", path, "' (kernel ", k, ", stride ", s, ", padding ", p,
               ", ceil_mode) on ", shape_str(x.shape), " has a partial last window, whose size and average ONNX ",
               "defines differently; use ceil_mode false or an input size the windows divide");
  }
  std::vector<OnnxAttr> attrs = {OnnxAttr::ints("kernel_shape", {k, k}), OnnxAttr::ints("strides", {s, s}),
                                 OnnxAttr::ints("pads", {p, p, p, p}), OnnxAttr::integer("ceil_mode", 0)};
  if (is_max) {
    attrs.push_back(OnnxAttr::ints("dilations", {d, d}));
    return g.node(path, "MaxPool", {x.name}, attrs, out);
  }
  attrs.push_back(OnnxAttr::integer("count_include_pad", a.at("count_include_pad").get<bool>() ? 1 : 0));
  return g.node(path, "AveragePool", {x.name}, attrs, out);
}
}  // namespace

OnnxValue export_op_layer(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x) {
  auto* l = dynamic_cast<models::OpLayer*>(&m);
  const std::string t = m.type_name();
  if (!l && t == "MaxPool2d") return export_max_pool2d(g, m, path, x);  // nn::MaxPool2d
  KILN_CHECK(l != nullptr, "ONNX export: module '", path, "' of type ", t, " is not the C++ class its exporter expects");
  if (t == "Sigmoid") return g.node(path, "Sigmoid", {x.name}, {}, x.shape);
  if (t == "Tanh") return g.node(path, "Tanh", {x.name}, {}, x.shape);
  if (t == "LeakyReLU")
    return g.node(path, "LeakyRelu", {x.name},
                  {OnnxAttr::real("alpha", (float)l->attrs().at("negative_slope").get<double>())}, x.shape);
  if (t == "GELU") {
    // Opsets 13..17 have no Gelu: x * 0.5 * (1 + erf(x / sqrt(2))), the exact form kiln computes.
    const OnnxValue e = g.node(join_path(path, "erf"), "Erf",
                               {g.node(join_path(path, "scale"), "Mul",
                                       {x.name, scalar(g, path, "inv_sqrt2", (float)(1.0 / std::sqrt(2.0)))}, {},
                                       x.shape)
                                    .name},
                               {}, x.shape);
    const OnnxValue one_plus = g.node(join_path(path, "one_plus"), "Add", {e.name, scalar(g, path, "one", 1.0f)}, {}, x.shape);
    const OnnxValue half_x = g.node(join_path(path, "half_x"), "Mul", {x.name, scalar(g, path, "half", 0.5f)}, {}, x.shape);
    return g.node(path, "Mul", {half_x.name, one_plus.name}, {}, x.shape);
  }
  if (t == "MaxPool2d") return pool_op_layer(g, *l, path, x, true);
  if (t == "AvgPool2d") return pool_op_layer(g, *l, path, x, false);
  throw Error(str_cat("ONNX export: layer '", path, "' of type ", t, " has no ONNX exporter"));
}

}  // namespace kiln::onnx_export
