// Command-line wiring of `kiln mem` and of `kiln train`'s memory options (--checkpoint,
// --memory-report), kept out of main.cpp so that file only gains a few lines.
#pragma once
#include <CLI/CLI.hpp>

#include "tools/cli_checks.h"
#include "tools/mem_command.h"
#include "engine/run/run_config.h"

namespace kiln {

CLI::App* add_mem_command(CLI::App& app, MemCommandOptions& o);
void add_train_memory_options(CLI::App* train, RunConfig& c);

}  // namespace kiln
