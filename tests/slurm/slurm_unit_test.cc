#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "slurm/config_gen.h"

namespace gpuslice::slurm {
namespace {

TEST(SlurmTimeLimit, RoundsUpToMinutes) {
  EXPECT_EQ(SlurmTimeLimit(0), "INFINITE");
  EXPECT_EQ(SlurmTimeLimit(90 * kSecond), "00:02:00");
  EXPECT_EQ(SlurmTimeLimit(8 * kHour), "08:00:00");
  EXPECT_EQ(SlurmTimeLimit(7 * 24 * kHour + kMinute), "7-00:01:00");
}

}  // namespace
}  // namespace gpuslice::slurm
