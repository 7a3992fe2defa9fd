// The autograd graph: a Node per recorded op, edges to the nodes that produced its inputs,
// saved tensors with version checks, and AccumulateGrad at the leaves.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln {

struct Edge {
  std::shared_ptr<Node> fn;  // null: that input needs no gradient
  int input_nr = 0;          // which output of fn this edge carries the gradient for
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  Tensor grad_slot;  // a leaf's: where backward writes its gradient when .grad is undefined (Tensor::grad_slot)
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;
  std::string name;
};

// A tensor kept for backward: an alias of the data (no autograd history, so no reference
// cycles) plus the storage version at the time it was saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // Checks the version and returns the alias; throws naming the op, the shape and both versions
  // if the tensor was changed in place after being saved, or if it was released.
  Tensor unpack(const std::string& op) const;
  void release() { data_ = Tensor(); released_ = true; }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool released_ = false;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  // grads: one per output of the op (undefined = zero). Returns one gradient per next edge.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  struct OutputInfo {
    Shape sizes;
    DType dtype;
    Device device;
  };
  std::vector<OutputInfo> outputs;  // metadata of the op's outputs (for zero-filling)
  std::string module;               // module path at record time (for reports)
};

// The node of an op recorded by engine/ops: a backward formula over saved tensors.
class FunctionNode : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(FunctionNode&, const std::vector<Tensor>& grads)>;
  FunctionNode(std::string op, Backward bw) : op_(std::move(op)), backward_(std::move(bw)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return op_; }
  void release_saved() override;

  // Saves a tensor for backward; retags its storage as an activation. Returns its index.
  int save(const Tensor& t);
  Tensor saved(int i) const;
  // Whether input i (in the order given to record_op) needs a gradient.
  bool needs_input_grad(int i) const { return i < (int)next_edges.size() && next_edges[i].fn != nullptr; }

 private:
  std::string op_;
  Backward backward_;
  std::vector<SavedTensor> saved_;
  bool released_ = false;
};

// Gradient sink of a leaf tensor: accumulates into .grad (tagged `grad`).
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// Builds a FunctionNode with edges to `inputs` and attaches it to `outputs` (their grad_fn).
// Returns null (and attaches nothing) when no input requires grad or grad mode is off.
std::shared_ptr<FunctionNode> record_op(const char* op, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& outputs, FunctionNode::Backward backward);
// For an in-place op on `self`: the node replaces self's history (its edge 0 is self's old
// history). Throws for a leaf that requires grad or a view of a tracked tensor.
std::shared_ptr<FunctionNode> record_inplace_op(const char* op, const Tensor& self, const std::vector<Tensor>& others,
                                                FunctionNode::Backward backward);
// Throws (before any data is touched) if an in-place op on `self` cannot be recorded.
void check_inplace(const char* op, const Tensor& self, const std::vector<Tensor>& others);
// The edge a gradient for `t` must flow into (its grad_fn, or its AccumulateGrad if a leaf).
Edge gradient_edge(const Tensor& t);

// Runs backward from `roots` with `grads` (undefined: ones for a one-element root).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

}  // namespace kiln
