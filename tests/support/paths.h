// Where tests find their data: fixtures in the repo, and ../shared/assets (overridable with
// HIBANA_SHARED_ASSETS) for the real tokenizer files and model configs.
#pragma once

#include <cstdlib>
#include <string>

namespace hibana::test {

inline std::string data_dir() { return HIBANA_TEST_DATA_DIR; }
inline std::string fixtures_dir() { return data_dir() + "/fixtures"; }
inline std::string shared_assets() {
  if (const char* e = std::getenv("HIBANA_SHARED_ASSETS"); e && *e) return e;
  return data_dir() + "/../../shared/assets";
}
inline std::string hibana_binary() { return HIBANA_BINARY; }

}  // namespace hibana::test
