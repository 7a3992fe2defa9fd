// Plan mode's offline half: given one recorded step (each allocation's rounded size and its
// lifetime in allocation/free order), assign every allocation an offset in one arena so that
// allocations alive at the same time never overlap, keeping the arena close to peak live bytes.
// Pure function over vectors: knows nothing of segments, bins or providers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/memory/allocator.h"

namespace kiln {

// One recorded allocation. Lifetime is [start, end) on the step's clock (one tick per alloc and
// per free); an allocation still alive at end_record() ends at the step's last tick + 1.
struct PlanRequest {
  size_t size = 0;  // rounded bytes
  StreamId stream = 0;
  uint64_t start = 0, end = 0;
};

struct AllocPlan {
  std::vector<PlanRequest> requests;  // in allocation order
  std::vector<size_t> offsets;        // offsets[i]: where requests[i] lives in the arena
  size_t arena_bytes = 0;             // max(offset + size)
  size_t peak_live_bytes = 0;         // the lower bound: most bytes alive at one tick
  // conflicts[conflict_begin[i] .. conflict_begin[i+1]): the requests whose bytes overlap
  // request i's (i itself included). None of them may be alive when i is served again, which is
  // all a replay has to check: O(its conflicts) per allocation instead of a search.
  std::vector<uint32_t> conflict_begin, conflicts;
};

// Greedy placement, three ways (largest first at the lowest offset that fits; largest first into
// the smallest gap; largest size x lifetime first into the smallest gap), keeping the smallest
// arena. A request goes between already-placed requests whose lifetimes overlap it, else on top.
// Requests on different streams never share addresses.
// O(n^2) per way in the number of requests; a training step has a few thousand.
AllocPlan plan_offsets(std::vector<PlanRequest> requests);

// Max over ticks of the bytes alive (the arena can never be smaller).
size_t peak_live_bytes(const std::vector<PlanRequest>& requests);

}  // namespace kiln
