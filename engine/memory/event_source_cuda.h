// CudaEventSource: the EventSource of a cuda:N caching allocator. record() puts a cudaEvent_t
// (created with cudaEventDisableTiming, taken from a pool) on the stream's cudaStream_t;
// query() asks cudaEventQuery (cudaErrorNotReady: false, success: true, anything else: a
// kiln::Error naming the device and stream). Completed events go back to the pool, so a run
// creates only as many events as are in flight at once. Compiled only with KILN_WITH_CUDA.
// Stream ids of a cuda device's allocator: 0 = its compute stream, 1 = its copy stream (both owned
// by kernels/cuda/runtime), any other value = a cudaStream_t handle of that device cast to an
// integer. This layer must not include kernels/: the streams come through a resolver function.
#pragma once
#ifdef KILN_WITH_CUDA
#include <cuda_runtime.h>

#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/memory/event_source.h"

namespace kiln {

constexpr StreamId kCudaComputeStream = 0;
constexpr StreamId kCudaCopyStream = 1;

// The cudaStream_t of a stream id on cuda:device (see above).
using CudaStreamResolver = cudaStream_t (*)(int device, StreamId stream);
// kiln's resolver: 0 and 1 name the runtime's compute and copy streams of the device (created on
// first use). Defined by kernels/cuda/runtime.cpp, which owns the streams.
cudaStream_t cuda_stream_for_id(int device, StreamId stream);

class CudaEventSource : public EventSource {
 public:
  CudaEventSource(int device, CudaStreamResolver resolve = &cuda_stream_for_id);
  ~CudaEventSource() override;  // destroys pooled and in-flight events (never throws)
  CudaEventSource(const CudaEventSource&) = delete;
  CudaEventSource& operator=(const CudaEventSource&) = delete;

  EventId record(StreamId stream) override;
  bool query(EventId e) override;

  // Events recorded and not yet seen complete; events created in all (pool + in flight).
  size_t in_flight() const;
  size_t created() const;

 private:
  struct InFlight {
    EventId id;
    cudaEvent_t ev;
  };
  // Returns the completed events at the front of one stream's queue to the pool. Events on one
  // stream complete in order, so the first unfinished one ends the scan.
  void reap(std::deque<InFlight>& q);
  bool ready(cudaEvent_t ev, EventId id);  // cudaEventQuery, errors thrown

  int device_;
  CudaStreamResolver resolve_;
  mutable std::mutex mu_;
  EventId next_id_ = 1;
  std::vector<cudaEvent_t> pool_;
  std::unordered_map<StreamId, std::deque<InFlight>> queues_;  // per stream, in record order
  std::unordered_map<EventId, StreamId> stream_of_;          // in-flight id -> its stream
  size_t created_ = 0;
};

}  // namespace kiln
#endif
