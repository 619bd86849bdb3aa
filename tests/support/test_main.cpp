#include <gtest/gtest.h>

#include "core/log.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  hibana::set_log_level(hibana::LogLevel::warn);
  return RUN_ALL_TESTS();
}
