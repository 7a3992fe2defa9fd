// Shared helpers of the allocator tests: a fake event source whose events finish when the test
// says so.
#pragma once
#include <vector>

#include "engine/memory/event_source.h"

namespace kiln_test {

class FakeEvents : public kiln::EventSource {
 public:
  kiln::EventId record(kiln::StreamId s) override {
    events_.push_back({s, false});
    return events_.size();
  }
  bool query(kiln::EventId e) override { return events_.at(e - 1).done; }
  // Everything queued on `s` so far has finished.
  void complete(kiln::StreamId s) {
    for (auto& e : events_)
      if (e.stream == s) e.done = true;
  }
  void complete_all() {
    for (auto& e : events_) e.done = true;
  }
  size_t recorded() const { return events_.size(); }

 private:
  struct Ev {
    kiln::StreamId stream;
    bool done;
  };
  std::vector<Ev> events_;
};

}  // namespace kiln_test
