// ONNX exporters of models/' blocks and networks: each repeats its module's forward() as nodes, in the
// same order, through its children's exporters (so a child type without an exporter is named in the
// error). A network whose children are not the ones its exporter knows is an error, not a silent gap.
#include <set>

#include "engine/export/onnx_exporters.h"
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

}  // namespace kiln::onnx_export
