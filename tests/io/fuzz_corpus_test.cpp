// Replays what safetensors_fuzz saved (tests/fuzz/seeds/ and tests/fuzz/corpus/, grown by
// scripts/fuzz) through its check, so every input it ever found interesting stays a regression
// test of the normal build.
#include <gtest/gtest.h>

#include "fuzz/checks/replay.h"
#include "fuzz/checks/safetensors.h"

namespace hibana::fuzz {
namespace {

TEST(FuzzCorpus, Safetensors) {
  replay_saved_inputs("safetensors_fuzz", check_safetensors);
}

}  // namespace
}  // namespace hibana::fuzz
