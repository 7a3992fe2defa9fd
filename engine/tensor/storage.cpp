#include "engine/tensor/storage.h"

namespace kiln {

StorageImpl::~StorageImpl() {
  if (allocator && data) allocator->deallocate(data);
  else if (external_free) external_free(data);
}

void StorageImpl::retag(MemoryTag t) {
  if (t == tag) return;
  if (allocator && data) allocator->retag(data, t);
  tag = t;
}

Storage make_storage(size_t nbytes, Device device) {
  auto s = std::make_shared<StorageImpl>();
  s->device = device;
  s->nbytes = nbytes;
  s->tag = memory_context().tag;
  if (nbytes > 0) {
    s->allocator = allocator_for(device);
    s->data = s->allocator->allocate(nbytes);
  }
  return s;
}

Storage wrap_storage(void* data, size_t nbytes, Device device, std::function<void(void*)> free_fn) {
  auto s = std::make_shared<StorageImpl>();
  s->data = data;
  s->nbytes = nbytes;
  s->device = device;
  s->external_free = std::move(free_fn);
  return s;
}

}  // namespace kiln
