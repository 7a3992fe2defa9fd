// The process-wide keyed rows of data-parallel random draws (see rng_rows.h).
#include "engine/core/rng_rows.h"

namespace kiln {

RngRows& rng_rows() {
  static RngRows rows;
  return rows;
}

}  // namespace kiln
