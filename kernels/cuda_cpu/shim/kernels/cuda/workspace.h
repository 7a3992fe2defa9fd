// CPU execution mode (kernels/cuda_cpu): stands in for kernels/cuda/workspace.h (found first on the
// CPU mode's include path). Scratch "device" memory for one backend call is host memory from malloc,
// exact size, so AddressSanitizer sees an access past its end.
#pragma once
#include <cstddef>
#include <cstdlib>

namespace kiln::cuda_on_cpu {

class Workspace {
 public:
  Workspace(int, size_t n) : ptr_(n ? std::malloc(n) : nullptr) {}
  ~Workspace() { std::free(ptr_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_;
};

}  // namespace kiln::cuda_on_cpu
