// Module: a node of the named module tree. Holds its own parameters and buffers (in
// registration order) and named children; gives torchvision-style dotted names
// ("layer1.0.downsample.1.running_mean"), state dicts, train/eval mode and device moves.
// operator() pushes the module's name onto the memory-attribution path (ModuleScope) and calls
// forward. Layers (Conv2d, BatchNorm2d, ...) live in their own files; this file must not know them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor/named_tensors.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

// What load_state_dict(strict = false) skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     // expected by the module, absent from the input
  std::vector<std::string> unexpected_keys;  // in the input, unknown to the module
};

class Module;

// One step of a model's forward that can be recomputed on its own (engine/nn/recompute.h):
// fn(x) runs `modules` (under their own module-path scopes) and returns the next activation.
struct Stage {
  std::string name;                                      // "layer2.1", "stem"
  std::vector<std::shared_ptr<Module>> modules;          // whose parameters fn uses
  std::function<Tensor(const Tensor&)> fn;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs forward under ModuleScope(name()) so allocations are attributed to this module.
  Tensor operator()(const Tensor& x);
  virtual Tensor forward(const Tensor& x) = 0;

  const std::string& type_name() const { return type_name_; }
  // Local name under the parent ("conv1", "0"); empty for a root.
  const std::string& name() const { return name_; }

  // ---- tree ----
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::shared_ptr<Module> child(const std::string& name) const;  // throws naming the known children
  // Pre-order, the root first with an empty name.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");
  // Calls fn(dotted name, module) on this module and every descendant, pre-order. Usable in a
  // constructor (named_modules needs the root to be owned by a shared_ptr already).
  void apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& prefix = "");

  // ---- parameters and buffers (pre-order: own entries first, then each child's) ----
  NamedTensors named_parameters(const std::string& prefix = "") const;
  NamedTensors named_buffers(const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> buffers() const;
  int64_t num_parameters() const;  // total elements of all parameters

  // Parameters and buffers, PyTorch's state_dict order (per module: params, buffers; then
  // children). Entries alias the module's storage (detached); clone to snapshot.
  NamedTensors state_dict() const;
  // Copies values in place (dtype cast allowed, shapes must match). strict: any missing or
  // unexpected key is an error; every problem (missing, unexpected, shape) is listed in one error.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

  // ---- modes and devices ----
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to d in place (the Tensor handles stay valid; grads dropped).
  Module& to(Device d);
  // Copies every parameter and buffer into d's allocator now, even when it is already on d, in
  // registration order (own parameters, own buffers, then each child's), tagged param: a fresh, compact
  // layout whose allocation sequence does not depend on how the model was built (a run builds and
  // initializes it elsewhere, engine/memory/host_scratch.h, and keeps only this). Handles stay valid.
  Module& rehome(Device d);
  // Casts every floating parameter and buffer to dt in place (integer buffers such as
  // num_batches_tracked keep their dtype); f64 modules are what gradient checks run on.
  Module& to(DType dt);
  void zero_grad();  // drops every parameter's .grad
  // Re-initializes this module's OWN parameters and buffers with its layer's default init, in place
  // (PyTorch's reset_parameters; BatchNorm2d also resets its running statistics): the tensor
  // handles stay valid, so an optimizer keeps stepping them, but its state (momentum, Adam's
  // moments) is not touched. Not recursive; the default does nothing (a module with no init of
  // its own). A model's custom init (resnet's kaiming_normal) is not redone: the layer's default is.
  // This throws training away: it is not a memory operation (docs/memory-rules-of-thumb.md).
  virtual void reset_parameters() {}
  // reset_parameters() on this module and every descendant, pre-order.
  void reset_all_parameters();
  // Sets each parameter's and buffer's Tensor::name to its dotted name (for reports).
  void name_tensors();

  // ---- recompute-on-backward (engine/nn/recompute.h) ----
  // The forward as a chain of stages whose composition equals forward() bit for bit; empty when
  // the module cannot be split (the default).
  virtual std::vector<Stage> stages() { return {}; }
  // segments > 0: operator() runs stages() as recompute_sequential(stages, segments); 0: plain.
  void set_recompute_segments(int segments);
  int recompute_segments() const { return recompute_segments_; }

 protected:
  // Registration (call in the constructor, in torchvision's order). Parameters are allocated by
  // the caller under MemoryScope(MemoryTag::param); they get requires_grad = true.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  void check_new_name(const std::string& name) const;

  std::string type_name_;
  std::string name_;
  bool training_ = true;
  int recompute_segments_ = 0;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace kiln::nn
