// Recording of ops into the graph, saved tensors, and leaf gradient accumulation.
#include "engine/autograd/node.h"

#include "engine/autograd/anomaly_mode.h"
#include "engine/autograd/grad_hook.h"
#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"

namespace kiln {

SavedTensor::SavedTensor(const Tensor& t, const char* /*op*/) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const std::string& op) const {
  KILN_CHECK(!released_, op,
             ": trying to backward through the graph a second time (its saved tensors were freed after the first "
             "backward); call backward with retain_graph=true the first time");
  if (!data_.defined()) return data_;
  KILN_CHECK(data_.version() == version_, op, ": a tensor ", data_.str(),
             " saved for backward was modified by an in-place operation (saved at version ", version_,
             ", now at version ", data_.version(), ")");
  return data_;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  KILN_CHECK(!released_, op_,
             ": trying to backward through the graph a second time (its saved tensors were freed after the first "
             "backward); call backward with retain_graph=true the first time");
  return backward_(*this, grads);
}

void FunctionNode::release_saved() {
  for (auto& s : saved_) s.release();
  released_ = true;
}

int FunctionNode::save(const Tensor& t) {
  if (t.defined() && t.storage()) {
    MemoryTag tag = t.storage()->tag;
    if (tag == MemoryTag::temporary || tag == MemoryTag::other) t.storage()->retag(MemoryTag::activation);
  }
  saved_.emplace_back(t, op_.c_str());
  return (int)saved_.size() - 1;
}

Tensor FunctionNode::saved(int i) const { return saved_.at(i).unpack(op_); }

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = grads.at(0);
  AutogradMeta& m = *leaf_->autograd;
  if (!g.defined()) {
    // Nothing flows in along this backward's edges, but every path into the leaf is done: a recompute
    // segment that lists the leaf as a parameter accumulated into it from its own backward (where the hook
    // is off, engine/nn/recompute.cpp), so this is when its gradient is complete.
    if (m.grad.defined())
      if (const GradAccumulatedHook& hook = grad_accumulated_hook()) hook(leaf_.get());
    return {};
  }
  NoGradGuard ng;
  if (!m.grad.defined() && m.grad_slot.defined()) {
    // A preassigned slot (a view into a data-parallel bucket): the gradient is copied in and the slot
    // becomes .grad, so the bucket holds it with no allocation of its own.
    copy_(m.grad_slot, g);
    m.grad = m.grad_slot;
  } else if (!m.grad.defined()) {
    // Steal the incoming buffer when nothing else holds it; otherwise copy.
    bool steal = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 && g.is_contiguous() &&
                 g.sizes() == leaf_->sizes && !g.requires_grad();
    if (steal) {
      g.storage()->retag(MemoryTag::grad);
      m.grad = g.detach();
    } else {
      MemoryScope ms(MemoryTag::grad);
      m.grad = clone(g);
    }
  } else {
    add_(m.grad, g);
  }
  // This backward's gradient of the leaf is complete (data-parallel buckets start from here).
  if (const GradAccumulatedHook& hook = grad_accumulated_hook()) hook(leaf_.get());
  return {};
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  AutogradMeta& m = *t.impl()->autograd;
  if (m.grad_fn) return Edge{m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

static void attach_outputs(const std::shared_ptr<FunctionNode>& node, const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->outputs.push_back({o.sizes(), o.dtype(), o.device()});
    if (!o.defined() || !is_floating(o.dtype())) continue;
    if (!o.impl()->autograd) o.impl()->autograd = std::make_unique<AutogradMeta>();
    o.impl()->autograd->grad_fn = node;
    o.impl()->autograd->output_nr = (int)i;
  }
}

std::shared_ptr<FunctionNode> record_op(const char* op, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& outputs, FunctionNode::Backward backward) {
  if (!any_requires_grad(inputs)) return nullptr;
  if (anomaly_mode_enabled()) check_op_outputs(op, inputs, outputs);
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  node->module = memory_context().module;
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach_outputs(node, outputs);
  return node;
}

void check_inplace(const char* op, const Tensor& self, const std::vector<Tensor>& others) {
  std::vector<Tensor> inputs = {self};
  inputs.insert(inputs.end(), others.begin(), others.end());
  if (!any_requires_grad(inputs)) return;
  KILN_CHECK(!(self.is_leaf() && self.requires_grad()), op, ": a leaf tensor ", self.str(),
             " that requires grad is used in an in-place operation (do it under NoGradGuard)");
  KILN_CHECK(!self.impl()->is_view, op, ": in-place operation on a view ", self.str(),
             " of a tensor that autograd tracks is not supported; apply it to the base tensor or use the "
             "out-of-place op");
}

std::shared_ptr<FunctionNode> record_inplace_op(const char* op, const Tensor& self, const std::vector<Tensor>& others,
                                                FunctionNode::Backward backward) {
  std::vector<Tensor> inputs = {self};
  inputs.insert(inputs.end(), others.begin(), others.end());
  if (!any_requires_grad(inputs)) return nullptr;
  check_inplace(op, self, others);
  if (anomaly_mode_enabled()) check_op_outputs(op, others, {self});
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  node->module = memory_context().module;
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach_outputs(node, {self});
  return node;
}

}  // namespace kiln
