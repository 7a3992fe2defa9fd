// Optimizer base: parameter groups (each with its own lr and weight decay), zero_grad, step
// (under NoGradGuard; state allocated under MemoryScope(MemoryTag::optimizer)), learning-rate
// factors for schedules, and state dicts of named Tensors for checkpoints. SGD and AdamW
// implement update(); parameters without a gradient are skipped, like PyTorch.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/tensor/named_tensors.h"

namespace kiln::optim {

struct ParamGroup {
  NamedTensors params;      // (name, parameter); names key the optimizer state
  double lr = 0.0;          // current learning rate (schedules rewrite it)
  double weight_decay = 0.0;
  double initial_lr = -1;   // base of schedules; < 0: set to lr by the optimizer
};

// true: the parameter gets no weight decay.
using NoDecayFn = std::function<bool(const std::string& name, const Tensor& p)>;
// Biases and normalization weights (every parameter with dim <= 1).
bool no_decay_bias_and_norm(const std::string& name, const Tensor& p);
// One group with weight decay (and, when no_decay is given and matches something, a second
// group with weight_decay 0 holding the excluded parameters). Empty groups are dropped.
std::vector<ParamGroup> make_param_groups(const NamedTensors& params, double lr, double weight_decay,
                                          const NoDecayFn& no_decay = nullptr);

class Optimizer {
 public:
  Optimizer(std::string type, std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  void zero_grad();  // drops every parameter's .grad
  void step();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  double lr() const { return groups_.at(0).lr; }        // of the first group
  void set_lr_factor(double f);                         // every group: lr = initial_lr * f
  const std::string& type() const { return type_; }
  int64_t steps_taken() const { return steps_; }
  // f32 contiguous tensors on cpu or cuda use fused per-element updates (kernels/common/
  // update_rules.h: an OpenMP loop, or one CUDA kernel per parameter) unless disabled;
  // everything else goes through in-place tensor ops.
  void set_fused(bool on) { fused_ = on; }

  // "step" (i64), "group.<k>.lr", "group.<k>.initial_lr" (f64), "state.<param>.<key>" for every
  // state tensor (momentum_buffer; exp_avg, exp_avg_sq, step). Entries alias live state.
  NamedTensors state_dict() const;
  // Restores the above; parameter names and state shapes must match (errors name them).
  void load_state_dict(const NamedTensors& state);

  // Every state tensor of every parameter, created now (zero-filled, group and parameter order, each
  // parameter's keys in state_keys() order, under the optimizer tag) where it does not exist yet, so no step
  // allocates state and a run's allocation sequence does not depend on which step is its first. A state made
  // here is not yet written: the first update initialises it as a lazily made one (SGD's momentum buffer =
  // the first gradient). Without this call the state is made by the first update, as before.
  void create_state();
  // Every state tensor copied into `device`'s allocator now, in create_state()'s order (AdamW's step
  // counters stay on their host: the CPU, or the meta device when it imitates the CPU): with
  // nn::Module::rehome, the fixed layout a run keeps after its set-up.
  void rehome(Device device);

 protected:
  // One parameter's update; g is its gradient (same shape, device and dtype).
  virtual void update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) = 0;
  // The named state tensor of a parameter; created zero-filled (under the optimizer memory tag)
  // when absent. created is set when it was.
  Tensor& state(const std::string& param, const std::string& key, const Tensor& like, bool* created = nullptr);
  Tensor* find_state(const std::string& param, const std::string& key);
  bool use_fused(const Tensor& p, const Tensor& g) const;
  // The state keys of a parameter, in creation order, and a fresh zero-filled state tensor for one.
  virtual std::vector<std::string> state_keys() const = 0;
  virtual Tensor make_state(const std::string& key, const Tensor& p) const;
  // Whether an update (or a loaded state) has written this parameter's state; an update marks it.
  bool written(const std::string& param) const { return written_.count(param) != 0; }
  void mark_written(const std::string& param) { written_.insert(param); }

  std::map<std::string, std::map<std::string, Tensor>> state_;
  std::set<std::string> written_;

 private:
  std::string type_;
  std::vector<ParamGroup> groups_;
  int64_t steps_ = 0;
  bool fused_ = true;
};

}  // namespace kiln::optim
