// Groups without peers (see process_group.h): one process alone (rank 0 of 1, what every run without a
// launcher uses) and ranks that exist only in imitation (rank r of n, the memory predictor's meta run of one
// data-parallel rank). Every collective leaves the data as it is.
#include <cstdlib>
#include <string>

#include "engine/dist/process_group.h"

namespace kiln::dist {

namespace {

class LocalGroup : public ProcessGroup {
 public:
  LocalGroup(int rank, int size, std::string backend) : rank_(rank), size_(size), backend_(std::move(backend)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }
  void broadcast_bytes(void*, int64_t, int root) override {
    KILN_CHECK(root >= 0 && root < size_, "dist::broadcast: root rank ", root, " outside a group of ", size_,
               size_ == 1 ? " process" : " processes");
  }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(int64_t*, int64_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  int rank_, size_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_process_group() { return std::make_unique<LocalGroup>(0, 1, "single"); }

std::unique_ptr<ProcessGroup> make_imitated_process_group(int rank, int size) {
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "dist: an imitated group needs 0 <= rank < size, got rank ",
             rank, " of ", size);
  return std::make_unique<LocalGroup>(rank, size, "imitated");
}

}  // namespace kiln::dist
