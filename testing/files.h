#pragma once
// Reading a whole file in a test: what a job wrote, a log, a status file.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpuslice::testing {

// The file's contents; empty if it does not exist or cannot be read (the test's expectation
// on the contents then fails and shows what it found).
inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpuslice::testing
