// `kiln mem` as a function (tests call it in-process): predicts one configuration's memory on the
// meta device and prints the accounts as text or one JSON object; --checkpoint auto and
// --max-batch search over meta runs; --report writes the HTML page.
#pragma once
#include <ostream>
#include <string>

#include "engine/run/mem_predict.h"

namespace kiln {

struct MemCommandOptions {
  MemConfig config;
  std::string recompute = "0";  // "N" or "auto"
  std::string device_memory;     // "8G": the budget (default: the device's capacity)
  bool json = false;
  bool max_batch = false;
  double margin = 0.2;
  std::string report;  // HTML path
};

void run_mem_command(const MemCommandOptions& o, std::ostream& out);

}  // namespace kiln
