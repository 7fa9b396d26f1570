// memcap/check.h: whether the interposer can hold a cap on this host. The built library must load
// under old glibc releases (its version needs are read from the ELF file), and a library that
// needs a newer glibc than the host's, a missing one or a file that is not one is refused with a
// message that says what is wrong.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "memcap/check.h"
#include "memcap/env.h"

namespace gpuslice::memcap {
namespace {

namespace fs = std::filesystem;

fs::path Scratch(const std::string& name) {
  return fs::temp_directory_path() / ("memcap_check_" + std::to_string(getpid()) + "_" + name);
}

TEST(CompareVersionsTest, NumericPartsInOrder) {
  EXPECT_LT(CompareVersions("2.9", "2.12"), 0);
  EXPECT_LT(CompareVersions("2.2.5", "2.12"), 0);
  EXPECT_GT(CompareVersions("2.34", "2.28"), 0);
  EXPECT_EQ(CompareVersions("2.17", "2.17.0"), 0);
  EXPECT_GT(CompareVersions("3", "2.99"), 0);
}

// RHEL 7 has glibc 2.17: every version the interposer asks for must be there (x86-64's base
// versions and the 2.12 robust mutexes; aarch64 starts at 2.17). Built plainly on this host it
// asked for GLIBC_2.34 (dlopen, shm_open, pthread_once) and GLIBC_2.33 (fstat).
TEST(InterposerCheckTest, InterposerNeedsNoNewGlibc) {
  const std::string lib = LibraryPath();
  ASSERT_FALSE(lib.empty());
  Result<std::string> needed = RequiredGlibc(lib);
  ASSERT_TRUE(needed.ok()) << needed.status().ToString();
  ASSERT_FALSE(needed->empty()) << "it uses libc, so it names a version";
  EXPECT_LE(CompareVersions(*needed, "2.17"), 0) << "libgpuslice-cuda.so needs glibc " << *needed;
  InterposerCheck ok = CheckInterposer(lib, "2.17");
  EXPECT_TRUE(ok.usable) << ok.problem;
  EXPECT_EQ(ok.required_glibc, *needed);
}

TEST(InterposerCheckTest, AGlibcOlderThanTheLibraryNeedsIsRefused) {
  const std::string lib = LibraryPath();
  Result<std::string> needed = RequiredGlibc(lib);
  ASSERT_TRUE(needed.ok());
  InterposerCheck c = CheckInterposer(lib, "2.1");
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.problem.find("needs glibc " + *needed + " but this host has 2.1"), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find(lib), std::string::npos);
  EXPECT_TRUE(CheckInterposer(lib, *needed).usable);
  EXPECT_TRUE(CheckInterposer(lib, "").usable) << "a host that is not glibc is not judged on versions";
}

TEST(InterposerCheckTest, MissingOrForeignFilesAreRefusedNotRead) {
  InterposerCheck none = CheckInterposer("", "2.36");
  EXPECT_FALSE(none.usable);
  EXPECT_NE(none.problem.find("not found"), std::string::npos);

  const fs::path missing = Scratch("missing.so");
  InterposerCheck gone = CheckInterposer(missing.string(), "2.36");
  EXPECT_FALSE(gone.usable);
  EXPECT_NE(gone.problem.find(missing.string()), std::string::npos) << gone.problem;
  EXPECT_EQ(RequiredGlibc(missing.string()).status().code(), StatusCode::kNotFound);

  const fs::path text = Scratch("text.so");
  std::ofstream(text) << "not an ELF file\n";
  EXPECT_EQ(RequiredGlibc(text.string()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(CheckInterposer(text.string(), "2.36").usable);

  // The real library cut short at every length up to its section headers: an error, never a
  // crash or a read past the end.
  std::ifstream in(LibraryPath(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  const fs::path cut = Scratch("cut.so");
  for (std::size_t n : {std::size_t{0}, std::size_t{16}, std::size_t{64}, std::size_t{1000}, bytes.size() / 2,
                        bytes.size() - 1}) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(n));
    Result<std::string> r = RequiredGlibc(cut.string());
    if (r.ok()) continue;  // the version tables may lie before the cut
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n << ": " << r.status().ToString();
  }
  fs::remove(text);
  fs::remove(cut);
}

TEST(InterposerCheckTest, HostGlibcIsThisProcesssLibc) {
#ifdef __GLIBC__
  EXPECT_EQ(CompareVersions(HostGlibc(), std::to_string(__GLIBC__) + "." + std::to_string(__GLIBC_MINOR__)), 0);
#else
  EXPECT_EQ(HostGlibc(), "");
#endif
}

}  // namespace
}  // namespace gpuslice::memcap
