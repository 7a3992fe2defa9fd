// A small test-and-test-and-set lock for the allocator: its critical sections are a few hundred
// instructions, where std::mutex's lock/unlock pair costs about as much as the work itself.
// Yields to the scheduler while waiting (build machines have 2 cores shared by many processes).
// Must not be held across anything that can block.
#pragma once
#include <atomic>
#include <thread>

namespace kiln {

class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace kiln
