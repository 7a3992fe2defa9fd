// Whether a device's allocator can be built here, without building it: cpu:0 and meta always;
// cuda:N in a build with CUDA when device N is visible. The memory predictor asks this before it
// asks the device for its allocator's policy, so a prediction for a card that is not in this
// machine (or a build without CUDA) uses the CUDA policy kiln would choose instead of failing.
#pragma once
#include <string>

#include "engine/core/device.h"

namespace kiln {

// True when allocator_for(d) would succeed; otherwise false with the reason in *why (if given).
bool device_present(Device d, std::string* why = nullptr);

}  // namespace kiln
