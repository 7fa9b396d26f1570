// One exit code per Status, whichever command reports it (README "Exit codes").
#include <gtest/gtest.h>

#include "api/exit_code.h"

namespace gpuslice::api {
namespace {

TEST(ExitCodeFor, EveryStatusMapsToTheReadmesTable) {
  const std::pair<StatusCode, int> table[] = {
      {StatusCode::kOk, 0},
      {StatusCode::kInvalidArgument, 2},
      {StatusCode::kNotFound, 3},
      {StatusCode::kPermissionDenied, 4},
      {StatusCode::kUnavailable, 5},
      {StatusCode::kDeadlineExceeded, 5},
      {StatusCode::kAlreadyExists, 1},
      {StatusCode::kFailedPrecondition, 1},
      {StatusCode::kResourceExhausted, 1},
      {StatusCode::kUnsupported, 1},
      {StatusCode::kInternal, 1},
      {StatusCode::kDataLoss, 1},
  };
  for (const auto& [code, exit] : table) {
    EXPECT_EQ(ExitCodeFor(code), exit) << StatusCodeName(code);
    EXPECT_EQ(ExitCodeFor(Status(code, "x")), exit) << StatusCodeName(code);
  }
}

}  // namespace
}  // namespace gpuslice::api
