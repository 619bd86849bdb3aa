// Loading the committed tiny checkpoints (tests/fixtures/models/<name>) and their references.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace hibana::test {

struct ReferencePrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> argmax;
  std::vector<float> last_logits;
  std::vector<int32_t> greedy;
  std::vector<int32_t> mtp_argmax;  // empty when the model has no MTP head
  std::vector<float> mtp_last_logits;
};

std::vector<std::string> fixture_model_names();
std::string fixture_model_dir(const std::string& name);
std::vector<ReferencePrompt> load_reference(const std::string& name);
// On the backend of `device` ("cpu" or "cuda"). A fixture without weights (only a config: its
// README says why) gets dummy bf16 weights, the same on every device.
std::unique_ptr<Model> load_fixture_model(const std::string& name, const std::string& device = "cpu");

// The devices model tests run on: the CPU, and CUDA (whose cases skip without a GPU).
std::vector<std::string> test_devices();
// True (after reporting a skip) when `device` cannot run here; use as
// `if (test::unavailable(device)) GTEST_SKIP();`.
bool unavailable(const std::string& device);

}  // namespace hibana::test
