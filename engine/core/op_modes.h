// The small enums that ops' signatures name and their kernels read: a loss's reduction and an
// interpolation's mode. Here, below both engine/ops and kernels/, so a public op header needs no kernel
// header. Values only: no behaviour.
#pragma once

namespace kiln {

enum class Reduction { none, mean, sum };     // a loss over its elements: kept, averaged, summed
enum class InterpMode { nearest, bilinear };  // interpolate / Upsample

}  // namespace kiln
