// Report periods and flags: every accepted form, and bad values rejected with an error naming
// the flag and the value; reports over an empty store or a period before any history.
#include <gtest/gtest.h>

#include "report/report.h"
#include "store/store.h"

namespace gpuslice::report {
namespace {

constexpr Micros kDec1 = 1796083200LL * kSecond;  // 2026-12-01T00:00:00Z

TEST(TimePoint, AcceptsDatesTimesAndEpochSeconds) {
  EXPECT_EQ(*ParseTimePoint("2026-12-01", "--from"), kDec1);
  EXPECT_EQ(*ParseTimePoint("2026-12-01T10:30", "--from"), kDec1 + 10 * kHour + 30 * kMinute);
  EXPECT_EQ(*ParseTimePoint("2026-12-01T10:30:15Z", "--from"), kDec1 + 10 * kHour + 30 * kMinute + 15 * kSecond);
  EXPECT_EQ(*ParseTimePoint("2026-12-01 00:00:01", "--from"), kDec1 + kSecond);
  EXPECT_EQ(*ParseTimePoint("1796083200", "--from"), kDec1);
  EXPECT_EQ(*ParseTimePoint("2024-02-29", "--to"), 1709164800LL * kSecond);
  EXPECT_EQ(FormatTimePoint(kDec1 + 10 * kHour + 30 * kMinute + 15 * kSecond), "2026-12-01T10:30:15Z");
}

TEST(TimePoint, BadValuesAreNamed) {
  for (const char* bad : {"", "yesterday", "2026-13-01", "2026-02-30", "2025-02-29", "2026-12-01T25:00",
                          "2026-12-01T10", "2026-12-01Tx", "2026-12-01 junk", "-5", "99999999999999999999",
                          "1969-12-31"}) {
    auto r = ParseTimePoint(bad, "--from");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--from"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos) << r.status().message();
  }
}

TEST(Period, SinceFromToAndDefaults) {
  const Micros now = kDec1 + 12 * kHour;
  auto p = ParsePeriod("7d", "", "", now);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->to, now);
  EXPECT_EQ(p->from, now - 7 * 24 * kHour);
  p = ParsePeriod("", "2026-11-30", "2026-12-01", now);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->from, kDec1 - 24 * kHour);
  EXPECT_EQ(p->to, kDec1);
  p = ParsePeriod("", "", "", now);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->to - p->from, 7 * 24 * kHour);
}

TEST(Period, BadSinceFromToByAreNamed) {
  const Micros now = kDec1;
  struct Bad {
    const char *since, *from, *to, *expect;
  };
  for (const Bad& b : std::vector<Bad>{{"7x", "", "", "--since"},
                                       {"-1d", "", "", "'-1d'"},
                                       {"0", "", "", "--since"},
                                       {"7d", "2026-11-01", "", "give one of them"},
                                       {"", "2026-12-01", "2026-11-01", "empty"},
                                       {"", "2026-12-01", "2026-12-01", "empty"},
                                       {"", "2027-01-01", "2027-02-01", "starts after now"},
                                       {"", "", "soon", "--to 'soon'"}}) {
    auto p = ParsePeriod(b.since, b.from, b.to, now);
    ASSERT_FALSE(p.ok()) << b.since << "|" << b.from << "|" << b.to;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(b.expect), std::string::npos) << p.status().message();
  }
  auto by = ParseGroupBy("team");
  ASSERT_FALSE(by.ok());
  EXPECT_NE(by.status().message().find("--by 'team'"), std::string::npos) << by.status().message();
  auto q = OptionsFromQuery({{"since", "7d"}, {"group", "user"}}, now);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("'group'"), std::string::npos);
  q = OptionsFromQuery({{"by", "nobody"}}, now);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("'nobody'"), std::string::npos);
}

TEST(Report, EmptyStoreAndPeriodBeforeHistoryAreClearErrors) {
  auto store = store::NewMemoryStore();
  ReportOptions o;
  o.now = kDec1;
  o.period = {kDec1 - 24 * kHour, kDec1};
  auto r = BuildReport(*store, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("holds none yet"), std::string::npos) << r.status().message();

  store::WriteBatch b;
  b.samples.push_back({kDec1 - kHour, "device/0", 500, 0, kMinute, kMinute, 0, 0});
  ASSERT_TRUE(store->Commit(b).ok());
  o.period = {kDec1 - 48 * kHour, kDec1 - 24 * kHour};
  r = BuildReport(*store, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("it begins 2026-11-30T23:00:00Z"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace gpuslice::report
