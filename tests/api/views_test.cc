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
  v.requeues = 2;
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
  EXPECT_EQ(v->requeues, 2);
  EXPECT_EQ(j["requeues"], 2);
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
      {"requeues", nullptr, "field 'requeues': missing"},
      {"requeues", "2", "field 'requeues'"},
      {"requeues", -1, "field 'requeues' = -1: expected a non-negative integer"},
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

json AQueue() {
  QueueView q;
  q.name = "interactive";
  q.default_kind = "shared";
  q.allowed_kinds = {"shared", "mps"};
  q.priority = 10;
  q.time_limit_us = 3'600'000'000;
  q.idle_reclaim = true;
  q.idle_window_us = 1'800'000'000;
  q.idle_grace_us = 300'000'000;
  q.idle_reclaim_mode = "on-demand";
  q.idle_signals = {"sm", "jupyter"};
  q.pending = 2;
  q.running = 1;
  q.oldest_wait_us = 5'000'000;
  return q.ToJson();
}

json ADevice() {
  DeviceView d;
  d.index = 1;
  d.uuid = "GPU-1";
  d.model = "A100-SXM4-40GB";
  d.memory = 40LL << 30;
  d.mode = "mig";
  d.used_milli = 500;
  d.reserved_for = 9;
  d.clients = 2;
  d.slices = {3, 4};
  d.held_milli = 643;
  d.mig_layout = {{19, 0, "1g.5gb", 5 << 30, 143, 3}, {14, 4, "2g.10gb", 10LL << 30, 286, 0}};
  d.util_percent = 12.5;  // memory_used stays unknown: null, never 0
  return d.ToJson();
}

json AnEvent() { return EventView{12, 1'700'000'000'000'000, 7, "start", "job 7 started on slice 3"}.ToJson(); }

TEST(ViewsTest, QueueDeviceEventRoundTripByteForByte) {
  for (const json& j : {AQueue(), ADevice(), AnEvent()}) {
    SCOPED_TRACE(j.dump());
    std::string back;
    if (j.contains("default_kind")) {
      auto v = QueueView::FromJson(j);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_EQ(v->idle_signals, (std::vector<std::string>{"sm", "jupyter"}));
      back = v->ToJson().dump();
    } else if (j.contains("mig_layout")) {
      auto v = DeviceView::FromJson(j);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_FALSE(v->memory_used.has_value());
      EXPECT_EQ(v->reserved_for, std::optional<std::uint64_t>(9));
      ASSERT_EQ(v->mig_layout.size(), 2u);
      EXPECT_EQ(v->mig_layout[1].profile, 14);
      back = v->ToJson().dump();
    } else {
      auto v = EventView::FromJson(j);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_EQ(v->type, "start");
      back = v->ToJson().dump();
    }
    EXPECT_EQ(back, j.dump());
  }
  json newer = ADevice();
  newer["power_watts"] = 300;
  EXPECT_TRUE(DeviceView::FromJson(newer).ok());
  json unreserved = ADevice();
  unreserved["reserved_for"] = nullptr;
  auto u = DeviceView::FromJson(unreserved);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_FALSE(u->reserved_for.has_value());
}

struct HostileOf {
  json (*make)();
  Hostile h;
};

Status ReadAny(const json& j) {
  if (j.contains("default_kind")) return QueueView::FromJson(j).status();
  if (j.contains("mig_layout")) return DeviceView::FromJson(j).status();
  return EventView::FromJson(j).status();
}

TEST(ViewsTest, HostileQueueDeviceEventIsAnErrorNamingTheField) {
  const HostileOf cases[] = {
      {AQueue, {"name", 5, "queue 5: field 'name' = 5: expected a string"}},
      {AQueue, {"pending", nullptr, "field 'pending': missing"}},
      {AQueue, {"pending", "2", "field 'pending'"}},
      {AQueue, {"running", 1.5, "field 'running'"}},
      {AQueue, {"idle_reclaim", 1, "field 'idle_reclaim' = 1: expected true or false"}},
      {AQueue, {"idle_signals", "sm", "field 'idle_signals'"}},
      {AQueue, {"idle_signals", json::array({1}), "field 'idle_signals'"}},
      {AQueue, {"allowed_kinds", nullptr, "field 'allowed_kinds': missing"}},
      {AQueue, {"oldest_wait_us", json::array(), "field 'oldest_wait_us'"}},
      {AQueue, {"time_limit_us", 1e300, "field 'time_limit_us'"}},
      {ADevice, {"index", -1, "field 'index'"}},
      {ADevice, {"index", 5'000'000'000LL, "field 'index' = 5000000000: out of range"}},
      {ADevice, {"draining", "no", "field 'draining'"}},
      {ADevice, {"clients", nullptr, "field 'clients': missing"}},
      {ADevice, {"util_percent", "12%", "field 'util_percent'"}},
      {ADevice, {"memory_used", true, "field 'memory_used'"}},
      {ADevice, {"reserved_for", "job 9", "field 'reserved_for'"}},
      {ADevice, {"slices", json::array({-3}), "field 'slices'"}},
      {ADevice, {"mig_layout", "19@0", "field 'mig_layout'"}},
      {ADevice, {"mig_layout", json::array({7}), "field 'mig_layout' element 0: expected an object"}},
      {ADevice,
       {"mig_layout", json::array({{{"profile", 19}, {"start", 0}}, {{"profile", "x"}, {"start", 4}}}),
        "field 'mig_layout' element 1: field 'profile'"}},
      {ADevice, {"mig_layout", json::array({{{"profile", 19}}}), "field 'mig_layout' element 0: field 'start': missing"}},
      {AnEvent, {"seq", "12", "field 'seq'"}},
      {AnEvent, {"time_us", nullptr, "field 'time_us': missing"}},
      {AnEvent, {"job", -7, "field 'job'"}},
      {AnEvent, {"type", 3, "field 'type'"}},
      {AnEvent, {"message", json::object(), "field 'message'"}},
  };
  for (const auto& c : cases) {
    json j = c.make();
    if (c.h.value.is_null()) {
      j.erase(c.h.field);
    } else {
      j[c.h.field] = c.h.value;
    }
    Status st;
    ASSERT_NO_THROW(st = ReadAny(j)) << c.h.field;
    ASSERT_FALSE(st.ok()) << c.h.field << " = " << c.h.value.dump();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.h.says), std::string::npos) << c.h.field << ": " << st.ToString();
  }
  for (const json& not_object : {json::array(), json(), json("queue")}) {
    EXPECT_FALSE(QueueView::FromJson(not_object).ok());
    EXPECT_FALSE(DeviceView::FromJson(not_object).ok());
    EXPECT_FALSE(EventView::FromJson(not_object).ok());
  }
}

TEST(ViewsTest, QueueDeviceEventListsNameThePosition) {
  json q = AQueue();
  q["running"] = "1";
  auto qs = QueuesFromJson(json{{"queues", {AQueue(), AQueue(), q}}, {"default_queue", "interactive"}});
  ASSERT_FALSE(qs.ok());
  EXPECT_NE(qs.status().message().find("queues[2]"), std::string::npos) << qs.status().ToString();
  EXPECT_NE(qs.status().message().find("field 'running'"), std::string::npos) << qs.status().ToString();
  json d = ADevice();
  d.erase("uuid");
  auto ds = DevicesFromJson(json{{"devices", {d}}});
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("devices[0]"), std::string::npos) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("field 'uuid': missing"), std::string::npos) << ds.status().ToString();
  json e = AnEvent();
  e["seq"] = nullptr;
  auto es = EventsFromJson(json{{"events", {AnEvent(), e}}});
  ASSERT_FALSE(es.ok());
  EXPECT_NE(es.status().message().find("events[1]"), std::string::npos) << es.status().ToString();
  EXPECT_FALSE(QueuesFromJson(json{{"queues", json::object()}}).ok());
  EXPECT_FALSE(DevicesFromJson(json::array()).ok());
  EXPECT_FALSE(EventsFromJson(json{{"evnts", json::array()}}).ok());
  auto ok = EventsFromJson(json{{"events", {AnEvent(), AnEvent()}}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 2u);
}

}  // namespace
}  // namespace gpuslice::api
