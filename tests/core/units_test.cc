#include "core/units.h"

#include "core/text.h"

#include <cmath>
#include <limits>

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

// Every value below is wrong in one of the classes hostile input comes in: negative, zero,
// NaN/inf spellings, exponents, overflow, beyond a sane bound, below a field's minimum, bytes
// that are not UTF-8. Each must be refused with a message that names it (escaped).
struct BadCase { const char* text; const char* says; };

template <typename Parse>
void ExpectAllRefused(Parse parse, std::initializer_list<BadCase> cases) {
  for (const BadCase& c : cases) {
    auto r = parse(c.text);
    ASSERT_FALSE(r.ok()) << "accepted '" << c.text << "' as " << *r;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.text << ": " << r.status().message();
    EXPECT_TRUE(IsValidUtf8(r.status().message())) << r.status().message();
  }
}

TEST(Bounds, GpuAmount) {
  ExpectAllRefused(ParseGpuAmount, {{"nan", "unexpected character 'n'"}, {"inf", "'inf'"},
                                    {"-0.5", "negative"}, {"1e3", "'e'"}, {"0", "more than zero"},
                                    {"2000000", "more than 1000000 GPUs"},
                                    {"0.5\xc3\xa9", "unexpected character '\xc3\xa9'"},
                                    {"0.5\xff", "'0.5\\xff'"}});
  EXPECT_EQ(*ParseGpuAmount("1000000"), kMaxMilliGpu);
}

TEST(Bounds, Bytes) {
  ExpectAllRefused(ParseBytes, {{"2PiB", "unknown unit"}, {"1025TiB", "more than 1024TiB"},
                                {"9999999999999999999", "too large"}, {"nan", "'nan'"},
                                {"1e9", "unknown unit 'e9'"}, {"10\xff" "GiB", "'10\\xffGiB'"}});
  EXPECT_EQ(*ParseBytes("1024TiB"), kMaxBytes);
}

TEST(Bounds, JobMemoryHasAMinimumAndSaysWhatABareNumberMeans) {
  ExpectAllRefused(ParseJobMemory, {{"10", "10B is less than the minimum 1MiB (a number without a unit is bytes: write 10GiB"},
                                    {"1023KiB", "less than the minimum 1MiB"},
                                    {"0", "less than the minimum"}, {"-1MiB", "negative"}});
  EXPECT_EQ(*ParseJobMemory("1MiB"), kMiB);
  EXPECT_EQ(*ParseJobMemory("10GiB"), 10 * kGiB);
  EXPECT_EQ(*ParseJobMemory("1048576"), kMiB);
}

TEST(Bounds, Durations) {
  ExpectAllRefused(ParseDuration, {{"36501d", "longer than 100 years"}, {"99999999999s", "longer than 100 years"},
                                   {"36500d1d", "longer than 100 years"}, {"nan", "unknown unit 'nan'"},
                                   {"inf", "unknown unit"}, {"1e3s", "unknown unit 'e'"}, {"-1", "negative"},
                                   {"1h\xff", "'1h\\xff'"}});
  EXPECT_EQ(*ParseDuration("36500d"), kMaxDuration);
  ExpectAllRefused(ParseTimeLimit, {{"1ms", "1ms is less than the minimum 1s"}, {"0", "less than the minimum 1s"},
                                    {"999ms", "minimum 1s"}});
  EXPECT_EQ(*ParseTimeLimit("1s"), kSecond);
  auto between = [](std::string_view t) { return ParseDurationIn(t, 100 * kMillisecond, kHour); };
  ExpectAllRefused(between, {{"2h", "more than the maximum 1h"}, {"10ms", "less than the minimum 100ms"}});
}

TEST(Bounds, MilliGpuFromHugeDoubleIsAnErrorNotUndefinedRounding) {
  EXPECT_FALSE(MilliGpuFromDevices(1e300, "col").ok());
  EXPECT_FALSE(MilliGpuFromDevices(std::numeric_limits<double>::infinity(), "col").ok());
}

}  // namespace
}  // namespace gpuslice
