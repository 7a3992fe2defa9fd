// `--amp [f16|bf16]`, the mixed-precision flag of `kiln train` and `kiln mem`: an option whose value is
// optional. `--amp` alone (or `--amp f16`) is f16 autocast with dynamic loss scaling, as before bf16 existed;
// `--amp bf16` is bf16 autocast without a loss scaler. Sets RunConfig::amp and amp_dtype; anything but f16 or
// bf16 after it is a usage error naming the flag (kiln train has no positional arguments, so the value
// cannot be mistaken for one). Flag parsing only: what the dtypes mean is engine/run/amp_training.h's.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "engine/run/run_config.h"

namespace kiln_cli {

inline CLI::Option* add_amp_option(CLI::App* app, kiln::RunConfig& c, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          "--amp",
          [&c](const std::string& v) {
            c.amp = true;
            c.amp_dtype = kiln::parse_amp_dtype(v);
          },
          help)
      ->expected(0, 1)
      ->check(CLI::IsMember({"f16", "bf16"}).description(""))
      ->type_name("[f16|bf16]");
}

}  // namespace kiln_cli
