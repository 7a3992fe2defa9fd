// The PyTorch oracle's plumbing (oracle.py through oracle_client.h): inputs go out as .npy, outputs,
// gradients, index outputs and updated BN buffers come back in the right files, checked against
// values computed here by hand; a bad call comes back as an error, not a crash.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "support/oracle/oracle_client.h"

using namespace kiln;

TEST_CASE("oracle: mse_loss, max with indices, batch_norm buffers, softmax with grad_out, errors") {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("kiln_parity_oracle_" + std::to_string(::getpid()))).string();
  HostArray x = host_array_from<float>(DType::f32, {2, 3}, {1, -2, 3, 0.5f, 4, -1});
  HostArray y = host_array_from<float>(DType::f32, {2, 3}, {0, 1, 1, 1, 1, 1});
  std::vector<oracle::Case> cases(5);
  cases[0].op = "mse_loss";
  cases[0].inputs = {x, y};
  cases[0].requires_grad = {1, 0};
  cases[1].op = "max";
  cases[1].inputs = {x};
  cases[1].kwargs = {{"dim", 1}};
  // batch_norm(x: (N=2, C=3), running_mean, running_var, weight=None, bias=None, training)
  cases[2].op = "batch_norm";
  cases[2].inputs = {x, host_array_from<float>(DType::f32, {3}, {0, 0, 0}),
                     host_array_from<float>(DType::f32, {3}, {1, 1, 1}), nullptr, nullptr};
  cases[2].kwargs = {{"training", true}, {"momentum", 0.5}};
  cases[3].op = "softmax";
  cases[3].inputs = {host_array_from<double>(DType::f64, {2}, {0.0, std::log(2.0)})};
  cases[3].kwargs = {{"dim", 0}};
  cases[3].grad_out = {host_array_from<double>(DType::f64, {2}, {1.0, 0.0})};
  cases[4].op = "matmul";
  cases[4].inputs = {x, x};  // (2,3) @ (2,3): shape error in torch
  cases[4].expect_error = true;

  std::vector<oracle::Result> r = oracle::run(cases, dir);
  REQUIRE(r.size() == 5);

  // mse = mean((x-y)^2) = (1+9+4+0.25+9+4)/6; d/dx = 2(x-y)/6; y has no grad.
  CHECK(r[0].error.empty());
  REQUIRE(r[0].outputs.size() == 1);
  CHECK(r[0].outputs[0].shape.empty());
  CHECK(r[0].outputs[0].data<float>()[0] == doctest::Approx(27.25 / 6).epsilon(1e-6));
  REQUIRE(r[0].grads.count(0) == 1);
  CHECK(r[0].grads.count(1) == 0);
  CHECK(r[0].grads[0].data<float>()[1] == doctest::Approx(2.0 * -3 / 6).epsilon(1e-6));

  // max over dim 1: values (3, 4), indices (2, 1) as int64; grad flows to the argmax positions.
  REQUIRE(r[1].outputs.size() == 2);
  CHECK(r[1].outputs[0].data<float>()[0] == 3.0f);
  CHECK(r[1].outputs[1].dtype == DType::i64);
  CHECK(r[1].outputs[1].data<int64_t>()[0] == 2);
  CHECK(r[1].outputs[1].data<int64_t>()[1] == 1);
  CHECK(r[1].grads[0].data<float>()[2] == 1.0f);
  CHECK(r[1].grads[0].data<float>()[0] == 0.0f);

  // BN training: running_mean <- 0.5*0 + 0.5*batch_mean; running_var uses the unbiased variance.
  REQUIRE(r[2].buffers.count(1) == 1);
  REQUIRE(r[2].buffers.count(2) == 1);
  CHECK(r[2].buffers[1].data<float>()[0] == doctest::Approx(0.5 * 0.75).epsilon(1e-6));
  CHECK(r[2].buffers[2].data<float>()[0] == doctest::Approx(0.5 + 0.5 * 0.125).epsilon(1e-6));
  CHECK(r[2].grads.count(1) == 0);  // running stats are not differentiated

  // softmax([0, ln 2]) = [1/3, 2/3]; with grad_out e0: dx = s0*(e0 - s) = [2/9, -2/9].
  CHECK(r[3].outputs[0].dtype == DType::f64);
  CHECK(r[3].outputs[0].data<double>()[1] == doctest::Approx(2.0 / 3).epsilon(1e-12));
  CHECK(r[3].grads[0].data<double>()[0] == doctest::Approx(2.0 / 9).epsilon(1e-12));
  CHECK(r[3].grads[0].data<double>()[1] == doctest::Approx(-2.0 / 9).epsilon(1e-12));

  CHECK(r[4].error.find("RuntimeError") != std::string::npos);
  CHECK(r[4].outputs.empty());
  std::filesystem::remove_all(dir);
}
