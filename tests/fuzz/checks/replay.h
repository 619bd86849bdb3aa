// Replays what the fuzzers saved (tests/fuzz/seeds/<target>/, hand-written, and
// tests/fuzz/corpus/<target>/, kept minimal by scripts/fuzz) through a target's check, so every
// input that ever found something new stays a regression test of the normal build.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/paths.h"

namespace hibana::fuzz {

inline std::vector<std::filesystem::path> saved_inputs(const std::string& target) {
  namespace fs = std::filesystem;
  std::vector<fs::path> paths;
  for (const char* kind : {"seeds", "corpus"}) {
    const fs::path dir = fs::path(test::data_dir()) / "fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

template <typename Check>
void replay_saved_inputs(const std::string& target, Check&& check) {
  const auto inputs = saved_inputs(target);
  ASSERT_FALSE(inputs.empty()) << "no saved inputs for " << target;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    try {
      check(std::string_view(bytes.str()));
    } catch (const std::exception& e) {
      ADD_FAILURE() << path.string() << ": " << e.what();
    }
  }
}

}  // namespace hibana::fuzz
