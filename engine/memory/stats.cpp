// MemoryStats helpers: peak reset and the JSON form used by snapshots and `kiln mem`.
#include "engine/memory/stats.h"

#include <nlohmann/json.hpp>

namespace kiln {

const char* pool_name(Pool p) {
  switch (p) {
    case Pool::small: return "small";
    case Pool::large: return "large";
    case Pool::plan: return "plan";
  }
  return "?";
}

void MemoryStats::reset_peak() {
  for (auto& p : pool) p.reset_peak();
  total.reset_peak();
  for (auto& t : tag_allocated) t.reset_peak();
  for (auto& t : tag_requested) t.reset_peak();
}

namespace {
nlohmann::json stat_json(const StatValue& v) { return {{"current", v.current}, {"peak", v.peak}}; }
nlohmann::json pool_json(const PoolStats& p) {
  return {{"allocated", stat_json(p.allocated)},
          {"reserved", stat_json(p.reserved)},
          {"active", stat_json(p.active)},
          {"requested", stat_json(p.requested)}};
}
}  // namespace

nlohmann::json stats_to_json(const MemoryStats& s) {
  nlohmann::json j;
  j["total"] = pool_json(s.total);
  for (int i = 0; i < kNumPools; ++i) j["pools"][pool_name((Pool)i)] = pool_json(s.pool[i]);
  for (int t = 0; t < kNumMemoryTags; ++t) {
    j["tags"][tag_name((MemoryTag)t)] = {{"allocated", stat_json(s.tag_allocated[t])},
                                         {"requested", stat_json(s.tag_requested[t])}};
  }
  j["counts"] = {{"allocs", s.num_allocs},           {"frees", s.num_frees},
                 {"segment_maps", s.num_segment_maps}, {"segment_unmaps", s.num_segment_unmaps},
                 {"retries", s.num_retries},         {"ooms", s.num_ooms},
                 {"plan_allocs", s.num_plan_allocs}, {"plan_divergences", s.num_plan_divergences}};
  j["largest_free_block"] = s.largest_free_block;
  j["capacity"] = s.capacity;
  j["fragmentation"] = s.fragmentation();
  j["cached_free"] = s.cached_free();
  return j;
}

}  // namespace kiln
