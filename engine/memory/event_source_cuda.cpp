// CudaEventSource (see event_source_cuda.h). Never run on the build machines (no GPU): only
// compiled there; tests/cuda/test_cuda_alloc.cpp exercises it on a GPU.
#ifdef KILN_WITH_CUDA
#include "engine/memory/event_source_cuda.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/memory/cuda_device_guard.h"

namespace kiln {

namespace {
[[noreturn]] void throw_event_error(int device, const char* call, EventId id, StreamId stream, cudaError_t e) {
  throw Error(str_cat("CudaEventSource on cuda:", device, ": ", call, " (event ", id, ", stream id ", stream,
                      ") failed: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}
}  // namespace

CudaEventSource::CudaEventSource(int device, CudaStreamResolver resolve) : device_(device), resolve_(resolve) {
  KILN_CHECK(resolve_ != nullptr, "CudaEventSource on cuda:", device, ": no stream resolver");
}

CudaEventSource::~CudaEventSource() {
  CudaDeviceGuard g(device_);
  for (cudaEvent_t ev : pool_) cudaEventDestroy(ev);
  // Destroying a recorded event whose work is pending is allowed: its resources are released
  // once the work completes.
  for (auto& kv : queues_)
    for (InFlight& f : kv.second) cudaEventDestroy(f.ev);
}

bool CudaEventSource::ready(cudaEvent_t ev, EventId id) {
  cudaError_t e = cudaEventQuery(ev);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    // "Not ready" is a status, not a failure: make sure it does not linger as the thread's last
    // error, where the next kernel launch check would take it for its own. Only that value is
    // cleared; a real pending error stays for its owner.
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  auto it = stream_of_.find(id);
  throw_event_error(device_, "cudaEventQuery", id, it == stream_of_.end() ? 0 : it->second, e);
}

void CudaEventSource::reap(std::deque<InFlight>& q) {
  while (!q.empty() && ready(q.front().ev, q.front().id)) {
    pool_.push_back(q.front().ev);
    stream_of_.erase(q.front().id);
    q.pop_front();
  }
}

EventId CudaEventSource::record(StreamId stream) {
  std::lock_guard<std::mutex> g(mu_);
  cudaStream_t s = resolve_(device_, stream);
  std::deque<InFlight>& q = queues_[stream];
  reap(q);  // bounds the queue: events nobody queries (same-stream reuse) are recycled here
  CudaDeviceGuard dg(device_);  // the event must belong to the stream's device
  cudaEvent_t ev = nullptr;
  if (!pool_.empty()) {
    ev = pool_.back();
    pool_.pop_back();
  } else {
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) throw_event_error(device_, "cudaEventCreateWithFlags(cudaEventDisableTiming)", next_id_, stream, e);
    ++created_;
  }
  const EventId id = next_id_;
  cudaError_t e = cudaEventRecord(ev, s);
  if (e != cudaSuccess) {
    pool_.push_back(ev);
    throw_event_error(device_, "cudaEventRecord", id, stream, e);
  }
  ++next_id_;
  q.push_back({id, ev});
  stream_of_[id] = stream;
  return id;
}

bool CudaEventSource::query(EventId id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = stream_of_.find(id);
  if (it == stream_of_.end()) {
    // Not in flight: it completed and its cudaEvent_t went back to the pool (ids are never reused).
    KILN_CHECK(id > 0 && id < next_id_, "CudaEventSource on cuda:", device_, ": event id ", id,
               " was never recorded");
    return true;
  }
  std::deque<InFlight>& q = queues_[it->second];
  auto pos = std::lower_bound(q.begin(), q.end(), id, [](const InFlight& f, EventId x) { return f.id < x; });
  KILN_CHECK(pos != q.end() && pos->id == id, "CudaEventSource on cuda:", device_, ": event ", id,
             " missing from its stream's queue");
  if (!ready(pos->ev, id)) return false;
  // Everything recorded earlier on the same stream has completed too: recycle it all.
  const size_t done = (size_t)(pos - q.begin()) + 1;
  for (size_t k = 0; k < done; ++k) {
    pool_.push_back(q.front().ev);
    stream_of_.erase(q.front().id);
    q.pop_front();
  }
  return true;
}

size_t CudaEventSource::in_flight() const {
  std::lock_guard<std::mutex> g(mu_);
  return stream_of_.size();
}

size_t CudaEventSource::created() const {
  std::lock_guard<std::mutex> g(mu_);
  return created_;
}

}  // namespace kiln
#endif
