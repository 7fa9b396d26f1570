// The nvml backend on a machine without a driver (the build machines): a clear Unavailable
// status naming the cause, never a crash.

#include <gtest/gtest.h>

#include "devices/backend.h"
#include "devices/nvml.h"

namespace gpuslice::devices {
namespace {

TEST(NvmlWithoutDriver, MissingLibraryIsUnavailableNoDriver) {
  BackendOptions o;
  o.kind = "nvml";
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto b = OpenBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(b.status().message().starts_with("no NVIDIA driver: ")) << b.status().message();
  EXPECT_NE(b.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(NvmlWithoutDriver, LibraryWithoutNvmlSymbolsIsUnavailable) {
  BackendOptions o;
  o.nvml_library = "libc.so.6";  // loads, but exports no nvmlInit
  auto b = NvmlBackend::Open(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("lacks nvmlInit"), std::string::npos) << b.status().message();
}

TEST(NvmlWithoutDriver, DefaultLibraryEitherWorksOrSaysNoDriver) {
  BackendOptions o;
  auto b = OpenBackend(o);
  if (b.ok()) {
    EXPECT_EQ((*b)->kind(), "nvml");
    GTEST_SKIP() << "a driver is present: " << (*b)->description();
  }
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(b.status().message().starts_with("no NVIDIA driver")) << b.status().message();
}

}  // namespace
}  // namespace gpuslice::devices
