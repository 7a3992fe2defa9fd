// A scratch allocator for the host: while a HostScratchScope lives, CPU allocations go to a caching
// allocator of their own (one per process, over plain host memory, never destroyed) instead of the CPU's
// allocator. A run builds and initializes its model, loads weights and training state inside one, then
// copies what it keeps into its device's allocator in a fixed order (nn::Module::rehome,
// optim::Optimizer::rehome): the set-up's temporaries leave no trace in the allocator that trains, so its
// allocation sequence, and with it the reserved bytes, is the same in every run and in the plan that
// replays it on the meta device. The scope ends by giving the scratch's free memory back to the system.
// Tensors made in the scope keep their scratch storage until they die. For the thread that sets up a run
// (no other thread may allocate on the CPU meanwhile); scopes do not nest.
#pragma once

namespace kiln {

class Allocator;

class HostScratchScope {
 public:
  HostScratchScope();
  ~HostScratchScope();
  HostScratchScope(const HostScratchScope&) = delete;
  HostScratchScope& operator=(const HostScratchScope&) = delete;

 private:
  Allocator* previous_ = nullptr;
};

}  // namespace kiln
