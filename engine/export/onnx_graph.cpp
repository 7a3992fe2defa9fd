// OnnxGraph over ONNX's own protobuf classes (onnx/onnx_pb.h from libonnx-dev): nodes, initializers and
// value names. It knows no module type: exporters (onnx_exporters.cpp) decide which nodes a module becomes.
#include "engine/export/onnx_graph.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/export/onnx_exporters.h"
#include "engine/ops/ops.h"

namespace kiln::onnx_export {

OnnxAttr OnnxAttr::integer(const std::string& n, int64_t v) {
  OnnxAttr a;
  a.name = n;
  a.kind = Kind::i;
  a.i = v;
  return a;
}
OnnxAttr OnnxAttr::real(const std::string& n, float v) {
  OnnxAttr a;
  a.name = n;
  a.kind = Kind::f;
  a.f = v;
  return a;
}
OnnxAttr OnnxAttr::str(const std::string& n, std::string v) {
  OnnxAttr a;
  a.name = n;
  a.kind = Kind::s;
  a.text = std::move(v);
  return a;
}

OnnxAttr OnnxAttr::ints(const std::string& n, std::vector<int64_t> v) {
  OnnxAttr a;
  a.name = n;
  a.kind = Kind::ints;
  a.list = std::move(v);
  return a;
}

std::string join_path(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

struct OnnxGraph::Impl {
  onnx::GraphProto graph;
  std::set<std::string> names;  // value and initializer names in use (one namespace in ONNX)
  std::set<std::string> node_names;
};

OnnxGraph::OnnxGraph(int64_t opset, Device device) : opset_(opset), device_(device), impl_(std::make_unique<Impl>()) {}
OnnxGraph::~OnnxGraph() = default;

void* OnnxGraph::proto() { return &impl_->graph; }

std::string OnnxGraph::unique_value_name(const std::string& want) {
  std::string n = want.empty() ? std::string("value") : want;
  for (int k = 1; impl_->names.count(n); ++k) n = want + "_" + std::to_string(k);
  impl_->names.insert(n);
  return n;
}

namespace {
// (N, d1, d2, ...): dimension 0 is the dynamic batch "N", the others fixed.
void set_batch_type(onnx::ValueInfoProto* v, const Shape& shape) {
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  auto* sh = tt->mutable_shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    auto* dim = sh->add_dim();
    if (d == 0) dim->set_dim_param("N");
    else dim->set_dim_value(shape[d]);
  }
}
}  // namespace

OnnxValue OnnxGraph::input(const std::string& name, const Shape& shape_batch1) {
  KILN_CHECK(!shape_batch1.empty() && shape_batch1[0] == 1, "ONNX export: input shape must start with batch 1, got ",
             shape_str(shape_batch1));
  KILN_CHECK(!impl_->names.count(name), "ONNX export: input name '", name, "' is taken");
  impl_->names.insert(name);
  set_batch_type(impl_->graph.add_input(), shape_batch1);
  impl_->graph.mutable_input(impl_->graph.input_size() - 1)->set_name(name);
  return OnnxValue{name, shape_batch1};
}

void OnnxGraph::output(const OnnxValue& v, const std::string& name) {
  onnx::GraphProto& g = impl_->graph;
  KILN_CHECK(v.name == name || !impl_->names.count(name), "ONNX export: output name '", name, "' is taken");
  bool produced = false;
  for (auto& n : *g.mutable_node())
    for (auto& out : *n.mutable_output())
      if (out == v.name) produced = true;
  if (produced && v.name != name) {
    // Rename the value everywhere it appears (its producer and any consumer).
    for (auto& n : *g.mutable_node()) {
      for (auto& out : *n.mutable_output())
        if (out == v.name) out = name;
      for (auto& in : *n.mutable_input())
        if (in == v.name) in = name;
    }
    impl_->names.insert(name);
  } else if (!produced) {
    // The model is the identity on its input (or returns an initializer): ONNX needs a producing node.
    onnx::NodeProto* n = g.add_node();
    n->set_op_type("Identity");
    n->set_name("output");
    n->add_input(v.name);
    n->add_output(name);
    impl_->names.insert(name);
  }
  set_batch_type(g.add_output(), v.shape);
  g.mutable_output(g.output_size() - 1)->set_name(name);
}

OnnxValue OnnxGraph::module(nn::Module& m, const std::string& path, const OnnxValue& x) {
  const OnnxExporter* fn = find_onnx_exporter(m.type_name());
  if (!fn) {
    std::string known;
    for (const std::string& t : onnx_exporter_types()) known += (known.empty() ? "" : ", ") + t;
    throw Error(str_cat("ONNX export: module '", path.empty() ? std::string("(root)") : path, "' of type ",
                        m.type_name(), " has no ONNX exporter (types with one: ", known, ")"));
  }
  return (*fn)(*this, m, path, x);
}

std::string OnnxGraph::initializer(const std::string& name, const Tensor& t) {
  KILN_CHECK(t.defined(), "ONNX export: initializer '", name, "' is undefined");
  KILN_CHECK(!impl_->names.count(name), "ONNX export: initializer name '", name, "' is taken");
  impl_->names.insert(name);
  // Host f32 copy in row-major order (any device, dtype or layout).
  Tensor h = t.device().is_cpu() ? t : to_device(t, Device::cpu());
  const std::vector<float> v = h.to_vector<float>();
  onnx::TensorProto* p = impl_->graph.add_initializer();
  p->set_name(name);
  p->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d = 0; d < t.dim(); ++d) p->add_dims(t.size(d));
  p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  initializer_bytes_ += (int64_t)(v.size() * sizeof(float));
  return name;
}

std::string OnnxGraph::constant_f32(const std::string& name, const std::vector<float>& v) {
  const std::string n = unique_value_name(name);
  onnx::TensorProto* p = impl_->graph.add_initializer();
  p->set_name(n);
  p->set_data_type(onnx::TensorProto::FLOAT);
  p->add_dims((int64_t)v.size());
  for (float f : v) p->add_float_data(f);
  return n;
}

std::string OnnxGraph::constant_i64(const std::string& name, const std::vector<int64_t>& v) {
  const std::string n = unique_value_name(name);
  onnx::TensorProto* p = impl_->graph.add_initializer();
  p->set_name(n);
  p->set_data_type(onnx::TensorProto::INT64);
  p->add_dims((int64_t)v.size());
  for (int64_t i : v) p->add_int64_data(i);
  return n;
}

OnnxValue OnnxGraph::node(const std::string& path, const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<OnnxAttr>& attrs, const Shape& out_shape) {
  onnx::NodeProto* n = impl_->graph.add_node();
  std::string nn_name = path.empty() ? op : path;
  for (int k = 1; impl_->node_names.count(nn_name); ++k) nn_name = (path.empty() ? op : path) + "_" + std::to_string(k);
  impl_->node_names.insert(nn_name);
  n->set_name(nn_name);
  n->set_op_type(op);
  for (const std::string& in : inputs) n->add_input(in);
  const std::string out = unique_value_name(nn_name);
  n->add_output(out);
  for (const OnnxAttr& a : attrs) {
    onnx::AttributeProto* p = n->add_attribute();
    p->set_name(a.name);
    switch (a.kind) {
      case OnnxAttr::Kind::i:
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(a.i);
        break;
      case OnnxAttr::Kind::f:
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(a.f);
        break;
      case OnnxAttr::Kind::ints:
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.list) p->add_ints(v);
        break;
      case OnnxAttr::Kind::s:
        p->set_type(onnx::AttributeProto::STRING);
        p->set_s(a.text);
        break;
    }
  }
  return OnnxValue{out, out_shape};
}

Shape OnnxGraph::probe(const OnnxValue& x, const std::function<Tensor(const Tensor&)>& fn) const {
  KILN_CHECK(!x.shape.empty(), "ONNX export: value '", x.name, "' has no known shape");
  NoGradGuard no_grad;
  return fn(zeros(x.shape, DType::f32, device_)).sizes();
}

int64_t OnnxGraph::num_nodes() const { return impl_->graph.node_size(); }

std::map<std::string, int64_t> OnnxGraph::op_counts() const {
  std::map<std::string, int64_t> c;
  for (const auto& n : impl_->graph.node()) ++c[n.op_type()];
  return c;
}

}  // namespace kiln::onnx_export
