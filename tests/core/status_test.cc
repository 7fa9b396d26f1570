#include "core/status.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}
Result<int> Quarter(int x) {
  GPUSLICE_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Status, CarriesCodeAndContext) {
  Status s = NotFound("job 7").WithContext("cancel");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: cancel: job 7");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd: 3");
  EXPECT_EQ(Quarter(6).value_or(-1), -1);
}

}  // namespace
}  // namespace gpuslice
