// Anomaly detection (`kiln train --detect-anomaly`, PyTorch's detect_anomaly): while on, every op
// recorded into the autograd graph checks its floating outputs for inf/NaN after computing them,
// and the backward engine checks every gradient a node returns, so the first non-finite value of a
// step throws NonFiniteError naming the op, its module path and the shape. Off by default; off, a
// recorded op pays one relaxed atomic load. On, every check reads one byte back from the device (a
// synchronization per op): a tool for locating a fault, not for every step.
// It must not decide what a caller does with the error (train::fit adds the step and stops the run).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln {

bool anomaly_mode_enabled();
void set_anomaly_mode(bool on);

class AnomalyModeGuard {
 public:
  explicit AnomalyModeGuard(bool on = true);
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool prev_;
};

// The first non-finite value found: op ("conv2d", "conv2d backward", "input"), module path ("" at
// the top level), and a message that says which output and whether the op's inputs were finite.
class NonFiniteError : public Error {
 public:
  NonFiniteError(std::string op, std::string module, const std::string& msg, int64_t row = -1)
      : Error(msg), op(std::move(op)), module(std::move(module)), row(row) {}
  std::string op, module;
  int64_t row;  // op "input": the first row of the batch that holds one; else -1
};

// True when every element of t is finite (or t is undefined, not floating, or on meta).
bool all_finite(const Tensor& t);
// "NaN" or "inf" (the first kind met scanning t on the host), for messages.
std::string non_finite_kind(const Tensor& t);

// Forward check of a recorded op: throws NonFiniteError when an output holds inf/NaN; the message
// says which inputs already held one (an input no recorded op produced: the batch or a parameter).
void check_op_outputs(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
// Backward check of a node's returned gradients (one per input edge of the op).
void check_op_gradients(const std::string& op, const std::string& module, const std::vector<Tensor>& grads);

}  // namespace kiln
