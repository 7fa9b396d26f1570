// The typed API views: what the daemon sends reads back into the same struct and writes out
// byte for byte (one schema at both ends), and a hostile or newer daemon's answer is an error
// naming the field, never an exception. (The daemon side of the round trip, on every answer of
// a scripted run, is in tests/daemon/golden_test.cc.)
#include <gtest/gtest.h>

#include "api/views.h"

namespace gpuslice::api {
namespace {

using json = nlohmann::json;

json AJob() {
  JobView v;
  v.id = 7;
  v.user = "alice";
  v.uid = 1000;
  v.gid = 1000;
  v.queue = "interactive";
  v.gpus = 0;
  v.milli = 250;
  v.argv = {"python", std::string("\xff\xfe", 2)};  // bytes that are not UTF-8 travel as b64
  v.cwd = "/home/alice";
  v.state = "running";
  v.slice = 3;
  v.pid = 4242;
  v.time_left_us = 60'000'000;
  v.activity = "idle";
  v.activity_basis = "sm,mem";
  return v.ToJson();
}

TEST(ViewsTest, JobRoundTripsByteForByte) {
  const json j = AJob();
  auto v = JobView::FromJson(j);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->argv[1], std::string("\xff\xfe", 2));
  EXPECT_EQ(v->ToJson().dump(), j.dump());
  EXPECT_FALSE(v->exit_code.has_value());
}

TEST(ViewsTest, UnknownFieldsFromANewerDaemonAreIgnored) {
  json j = AJob();
  j["something_new"] = {{"x", 1}};
  EXPECT_TRUE(JobView::FromJson(j).ok());
}

struct Hostile {
  const char* field;
  json value;  // null: the field is removed
  const char* says;
};

TEST(ViewsTest, HostileJobIsAnErrorNamingTheField) {
  const Hostile cases[] = {
      {"id", "seven", "field 'id'"},
      {"id", -1, "field 'id'"},
      {"state", nullptr, "field 'state': missing"},
      {"pid", 1e30, "field 'pid'"},
      {"pid", 9'000'000'000LL, "field 'pid' = 9000000000: out of range"},
      {"start_time_us", "0", "field 'start_time_us'"},
      {"argv", "ls", "field 'argv'"},
      {"argv", json::array({1}), "field 'argv' element 0"},
      {"exit_code", "0", "field 'exit_code'"},
      {"pending_reason", "busy", "field 'pending_reason'"},
  };
  for (const auto& c : cases) {
    json j = AJob();
    if (c.value.is_null()) {
      j.erase(c.field);
    } else {
      j[c.field] = c.value;
    }
    auto v = JobView::FromJson(j);
    ASSERT_FALSE(v.ok()) << c.field << " = " << c.value.dump();
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(c.says), std::string::npos)
        << c.field << ": " << v.status().ToString();
  }
  EXPECT_FALSE(JobView::FromJson(json::array()).ok());
  EXPECT_FALSE(JobView::FromJson(json()).ok());
}

TEST(ViewsTest, ListsNameThePositionOfTheBadRecord) {
  json bad = AJob();
  bad["slice"] = "3";
  json answer{{"jobs", {AJob(), bad}}};
  auto v = JobsFromJson(answer);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("jobs[1]"), std::string::npos) << v.status().ToString();
  EXPECT_NE(v.status().message().find("field 'slice'"), std::string::npos) << v.status().ToString();
  EXPECT_FALSE(JobsFromJson(json{{"jobs", "none"}}).ok());
  EXPECT_FALSE(JobsFromJson(json::object()).ok());
}

TEST(ViewsTest, SliceWithAndWithoutFigures) {
  SliceView s;
  s.id = 3;
  s.job = 7;
  s.kind = "shared";
  s.devices = {1};
  s.uuids = {"GPU-1"};
  s.milli = 250;
  const json plain = s.ToJson();
  EXPECT_FALSE(plain.contains("idle_state"));
  auto back = SliceView::FromJson(plain);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->figures.has_value());
  s.figures.emplace().idle_state = "unmeasured";  // unknown figures stay null, never 0
  const json listed = s.ToJson();
  EXPECT_TRUE(listed["idle_seconds"].is_null());
  EXPECT_TRUE(listed["util_percent"].is_null());
  auto again = SliceView::FromJson(listed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson().dump(), listed.dump());
  json bad = listed;
  bad["devices"] = json::array({"0"});
  auto err = SliceView::FromJson(bad);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("field 'devices'"), std::string::npos) << err.status().ToString();
}

}  // namespace
}  // namespace gpuslice::api
