// One process alone (see process_group.h): rank 0 of 1, every collective leaves the data as it is.
#include <cstdlib>

#include "engine/dist/process_group.h"

namespace kiln::dist {

namespace {

class SingleProcessGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void broadcast_bytes(void*, int64_t, int root) override { check_root(root); }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(int64_t*, int64_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  static void check_root(int root) {
    KILN_CHECK(root == 0, "dist::broadcast: root rank ", root, " outside a group of 1 process");
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_process_group() { return std::make_unique<SingleProcessGroup>(); }

}  // namespace kiln::dist
