#include "core/units.h"

#include <cmath>

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

struct GoodCase { const char* text; std::int64_t want; };

TEST(ParseGpuAmount, AcceptsMilliFractionsAndWholeDevices) {
  for (const GoodCase& c : {GoodCase{"250m", 250}, {"0.25", 250}, {"1", 1000}, {"2", 2000},
                            {"1.5", 1500}, {"0.001", 1}, {" 500m ", 500}, {"8", 8000}}) {
    auto r = ParseGpuAmount(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.text;
  }
}

TEST(ParseGpuAmount, RejectsWithMessageNamingTheValue) {
  for (const char* bad : {"", "-1", "0", "0.0001", "abc", "1.2.3", "0m", "2.5m",
                          "99999999999999999999", "1e3", "m"}) {
    auto r = ParseGpuAmount(bad);
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    if (*bad) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
}

TEST(ParseBytes, BinaryAndDecimalUnits) {
  for (const GoodCase& c : {GoodCase{"10GiB", 10 * kGiB}, {"512MiB", 512 * kMiB}, {"1.5GiB", 3 * kGiB / 2},
                            {"80GB", 80'000'000'000}, {"1024", 1024}, {"4KiB", 4096}, {"2Gi", 2 * kGiB}}) {
    auto r = ParseBytes(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.text;
  }
  for (const char* bad : {"", "-5GiB", "10XB", "GiB", "1.2.3MiB", "99999999999TiB"}) {
    EXPECT_FALSE(ParseBytes(bad).ok()) << bad;
  }
}

TEST(ParseDuration, UnitsAndCompounds) {
  for (const GoodCase& c : {GoodCase{"90s", 90 * kSecond}, {"24h", 24 * kHour}, {"30m", 30 * kMinute},
                            {"500ms", 500 * kMillisecond}, {"1h30m", 90 * kMinute}, {"15", 15 * kSecond},
                            {"2d", 48 * kHour}, {"1.5h", 90 * kMinute}}) {
    auto r = ParseDuration(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.text;
  }
  for (const char* bad : {"", "-1h", "5x", "h", "1hh", "99999999999999999d"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(Format, RoundTripsThroughParse) {
  EXPECT_EQ(FormatMilliGpu(250), "250m");
  EXPECT_EQ(FormatMilliGpu(2000), "2");
  EXPECT_EQ(FormatMilliGpu(1500), "1.5");
  EXPECT_EQ(FormatBytes(10 * kGiB), "10GiB");
  EXPECT_EQ(FormatBytes(512 * kMiB), "512MiB");
  EXPECT_EQ(FormatBytes(100), "100B");
  EXPECT_EQ(FormatDuration(90 * kMinute), "1h30m");
  EXPECT_EQ(FormatDuration(90 * kSecond), "1m30s");
  EXPECT_EQ(FormatDuration(500 * kMillisecond), "500ms");
  for (MilliGpu m : {1, 250, 999, 1000, 1250, 8000}) EXPECT_EQ(*ParseGpuAmount(FormatMilliGpu(m)), m);
}

TEST(MilliGpuFromDevices, RoundsOnceAndRejectsNonsense) {
  EXPECT_EQ(*MilliGpuFromDevices(0.2499999, "col"), 250);
  EXPECT_EQ(*MilliGpuFromDevices(1.0, "col"), 1000);
  EXPECT_FALSE(MilliGpuFromDevices(-0.5, "col").ok());
  EXPECT_FALSE(MilliGpuFromDevices(std::nan(""), "col").ok());
}

}  // namespace
}  // namespace gpuslice
