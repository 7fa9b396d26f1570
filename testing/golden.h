#pragma once
// Golden files for tests that must not change what the code does (refactors keep behaviour):
// the output is compared with a checked-in text line by line, so a failure names the first
// line that differs. With GPUSLICE_UPDATE_GOLDEN set the file is re-recorded instead and the
// test is skipped (review the diff). Call it last in a test: it ends the test on a difference.

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace gpuslice::testing {

inline void ExpectMatchesGolden(const std::string& golden, const std::string& text) {
  if (std::getenv("GPUSLICE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden) << text;
    GTEST_SKIP() << "re-recorded " << golden;
  }
  std::ifstream in(golden);
  ASSERT_TRUE(in.good()) << golden << ": missing (record it with GPUSLICE_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  std::istringstream a(want.str()), b(text);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    ASSERT_EQ(ga, gb) << golden << ":" << line << ": one text ends before the other";
    ASSERT_EQ(la, lb) << golden << ":" << line << " differs";
  }
  EXPECT_EQ(want.str(), text);
}

}  // namespace gpuslice::testing
