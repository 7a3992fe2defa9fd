// The leak watch (see memory_watch.h).
#include "engine/train/memory_watch.h"

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"

namespace kiln::train {

std::string MemoryGrowth::message() const {
  return str_cat("memory watch: live memory grew in ", steps, " consecutive steps by ", total_per_step,
                 " bytes per step; most of it in tag ", tag, " at ", module, " (", bytes_per_step,
                 " bytes per step) - is a tensor of every step kept alive (a list of losses or outputs)?");
}

MemoryWatch::MemoryWatch(Device device, MemoryWatchOptions options) : device_(device), o_(options) {
  KILN_CHECK(o_.warmup_steps >= 0 && o_.consecutive >= 1 && o_.threshold_bytes >= 0, "MemoryWatch: bad options (",
             o_.warmup_steps, " warm-up steps, ", o_.consecutive, " consecutive, threshold ", o_.threshold_bytes, ")");
}

bool MemoryWatch::active() const { return caching_allocator_for(device_) != nullptr; }

void MemoryWatch::restart() {
  seen_ = 0;
  reported_ = false;
  history_.clear();
}

MemoryWatch::Account MemoryWatch::snapshot() const {
  Account a;
  CachingAllocator* alloc = caching_allocator_for(device_);
  if (!alloc) return a;
  for (const SegmentInfo& s : alloc->segments())
    for (const BlockInfo& b : s.blocks)
      if (b.state == "allocated") a[{tag_name(b.tag), b.module.empty() ? "(top level)" : b.module}] += (int64_t)b.size;
  return a;
}

std::optional<MemoryGrowth> MemoryWatch::observe(int64_t shape_key) {
  if (!active()) return std::nullopt;
  if (shape_key != key_) {
    restart();
    key_ = shape_key;
  }
  ++seen_;
  if (seen_ <= o_.warmup_steps) return std::nullopt;
  history_.push_back(snapshot());
  if ((int)history_.size() > o_.consecutive + 1) history_.erase(history_.begin());
  if (reported_ || (int)history_.size() < o_.consecutive + 1) return std::nullopt;
  auto total = [](const Account& a) {
    int64_t t = 0;
    for (const auto& [k, v] : a) t += v;
    return t;
  };
  for (size_t i = 1; i < history_.size(); ++i)
    if (total(history_[i]) - total(history_[i - 1]) <= o_.threshold_bytes) return std::nullopt;
  // Every judged step grew: name the (tag, module) that grew most from the first to the last.
  const Account& first = history_.front();
  const Account& last = history_.back();
  MemoryGrowth g;
  int64_t best = INT64_MIN;
  for (const auto& [k, v] : last) {
    auto it = first.find(k);
    const int64_t d = v - (it == first.end() ? 0 : it->second);
    if (d > best) best = d, g.tag = k.first, g.module = k.second;
  }
  g.steps = o_.consecutive;
  g.bytes_per_step = best / o_.consecutive;
  g.total_per_step = (total(last) - total(first)) / o_.consecutive;
  g.at_step = seen_;
  reported_ = true;
  return g;
}

}  // namespace kiln::train
