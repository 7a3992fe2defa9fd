// The model file (docs/model-files.md) of each built-in model: small_cnn, resnet18, resnet34 and their
// _small variants written as JSON with the same parameter names and the same forward, so
// `kiln model show --json NAME` prints a starting point for a user's own network and the tests can
// check that file -> model gives the built-in model's names and logits. Must not build modules.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::models {

// Throws kiln::Error naming the built-in models that have a file form for any other name.
nlohmann::json builtin_model_json(const std::string& name);

// A model file as text people read: top-level fields first, then one layer per line ("name" and "type"
// first), a block's or repeat's layers indented under it. Parses back to `doc`.
std::string format_model_json(const nlohmann::json& doc);

}  // namespace kiln::models
