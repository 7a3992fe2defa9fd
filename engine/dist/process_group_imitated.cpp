// One rank of a group that exists only in imitation (see process_group.h): rank r of n, every collective
// leaves the data as it is. The memory predictor runs a data-parallel rank's step on meta tensors with it,
// so that DataParallel and train_step make the allocations of a real rank without any peer.
#include <cstdlib>

#include "engine/dist/process_group.h"

namespace kiln::dist {

namespace {

class ImitatedProcessGroup : public ProcessGroup {
 public:
  ImitatedProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "imitated"; }
  void broadcast_bytes(void*, int64_t, int) override {}
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(int64_t*, int64_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  int rank_, size_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_imitated_process_group(int rank, int size) {
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "dist: an imitated group needs 0 <= rank < size, got rank ",
             rank, " of ", size);
  return std::make_unique<ImitatedProcessGroup>(rank, size);
}

}  // namespace kiln::dist
