// Recording format: round trip through JSON and files, and bad input named by field.

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "devices/fake.h"
#include "devices/recording.h"
#include "devices/replay.h"

namespace gpuslice::devices {
namespace {

Recording MakeRecording(int* errors = nullptr, int inject = 0) {
  ManualClock clock(5000 * kSecond);
  FakeBackend fake(*ParseSimulateSpec("2xH100-80GB"), clock.AsClock());
  FakeStep s;
  s.gpu_util = 250;
  s.processes = {{77, kGiB, 250, 10, "", false}, {78, kGiB, 0, 0, "", true}};
  fake.AddStep(DeviceIndex(1), s);
  fake.InjectError(FakeCall::kSample, Unavailable("driver hiccup"), inject);
  auto r = Record(fake, 3 * kSecond, kSecond, [&](Micros d) { clock.Advance(d); }, errors);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

TEST(Recording, RoundTripsThroughJsonExactly) {
  Recording r = MakeRecording();
  ASSERT_EQ(r.devices.size(), 2u);
  ASSERT_EQ(r.samples.size(), 6u);
  auto back = RecordingFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(r));
  const auto& s = back->samples[1];
  EXPECT_EQ(s.gpu_util.value(), 250);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[1].memory_used.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(back->devices[0].model->name, "H100-80GB");
}

TEST(Recording, FailedReadsAreSkippedAndCounted) {
  int errors = -1;
  // The priming reads consume the first two injected errors; the third hits a recorded round.
  Recording r = MakeRecording(&errors, 3);
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(r.samples.size(), 5u);
}

TEST(Recording, FileRoundTrip) {
  const std::string path = "/tmp/gs-recording-" + std::to_string(::getpid()) + ".json";
  Recording r = MakeRecording();
  ASSERT_TRUE(WriteRecordingFile(r, path).ok());
  auto back = ReadRecordingFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->samples.size(), r.samples.size());
  auto replay = ReplayBackend::OpenFile(path, nullptr);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ((*replay)->ListDevices()->size(), 2u);
  std::filesystem::remove(path);
  auto missing = ReadRecordingFile(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Recording, BadInputIsNamedByField) {
  nlohmann::json j = ToJson(MakeRecording());
  struct Case {
    std::function<void(nlohmann::json&)> mutate;
    std::string expect;
  } cases[] = {
      {[](auto& x) { x["format"] = "csv"; }, "format"},
      {[](auto& x) { x["version"] = 99; }, "recording.version: 99"},
      {[](auto& x) { x["samples"][2]["gpu_util"] = "high"; }, "samples[2].gpu_util"},
      {[](auto& x) { x["samples"][0]["gpu_util"] = 1001; }, "out of range"},
      {[](auto& x) { x["samples"][0]["device"] = 7; }, "samples[0].device: 7"},
      {[](auto& x) { x["samples"][1].erase("window_end"); }, "window_end: missing"},
      {[](auto& x) { x["devices"][1]["mig_current"] = "maybe"; }, "maybe"},
      {[](auto& x) { x["samples"][1]["processes"][0]["memory_used"] = {{"missing", "BOGUS"}}; }, "samples[1].processes[0].memory_used"},
  };
  for (const auto& c : cases) {
    nlohmann::json bad = j;
    c.mutate(bad);
    auto r = RecordingFromJson(bad);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(Recording, WrongTypesAreErrorsNotExceptions) {
  // Each used to throw out of RecordingFromJson (nlohmann's value()/operator[] on the wrong
  // type), ending `--backend replay:FILE`, or was undefined behaviour (a float into an int).
  nlohmann::json j = ToJson(MakeRecording());
  struct Case {
    std::function<void(nlohmann::json&)> mutate;
    std::string expect;
  } cases[] = {
      {[](auto& x) { x["format"] = 5; }, "format"},
      {[](auto& x) { x["samples"][0]["gpu_util"] = {{"missing", 5}}; }, "samples[0].gpu_util: bad status"},
      {[](auto& x) { x["samples"] = "many"; }, "recording.samples: expected an array"},
      {[](auto& x) { x["samples"][0]["processes"] = 7; }, "samples[0].processes: expected an array"},
      {[](auto& x) { x["devices"][0]["gpu_instances"] = {{"a", 1}}; }, "devices[0].gpu_instances"},
      {[](auto& x) { x["version"] = 1e300; }, "recording.version: bad value"},
      {[](auto& x) { x["samples"][0]["device"] = 4294967296; }, "samples[0].device: bad value"},
      {[](auto& x) { x["samples"][0]["sm_clock_mhz"] = 4294967296; }, "samples[0].sm_clock_mhz"},
  };
  for (const auto& c : cases) {
    nlohmann::json bad = j;
    c.mutate(bad);
    auto r = RecordingFromJson(bad);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  nlohmann::json why = j;  // a "why" that is not a string is dropped, not fatal
  why["samples"][0]["gpu_util"] = {{"missing", "NOT_FOUND"}, {"why", 7}};
  auto r = RecordingFromJson(why);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples[0].gpu_util.status().code(), StatusCode::kNotFound);
}

TEST(Recording, RecordRejectsBadIntervals) {
  FakeBackend fake(*ParseSimulateSpec("1xH100-80GB"), [] { return Micros{0}; });
  auto noop = [](Micros) {};
  EXPECT_EQ(Record(fake, kSecond, 0, noop).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Record(fake, kSecond, 2 * kSecond, noop).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::devices

namespace gpuslice::devices {
namespace {

TEST(RecordToFile, RecordsAFakeInRealTimeAndReplaysIt) {
  const std::string path = "/tmp/gs-record-" + std::to_string(::getpid()) + ".json";
  BackendOptions o;
  o.kind = "fake";
  o.simulate = "2xA100-80GB";
  std::string summary;
  ASSERT_TRUE(RecordToFile(o, 400 * kMillisecond, 200 * kMillisecond, path, &summary).ok());
  EXPECT_NE(summary.find("recorded 4 samples of 2 device(s)"), std::string::npos) << summary;
  BackendOptions r;
  r.kind = "replay";
  r.replay_file = path;
  auto replay = OpenBackend(r);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_EQ((*replay)->kind(), "replay");
  EXPECT_EQ((*replay)->ListDevices()->at(1).model->name, "A100-80GB");
  std::filesystem::remove(path);
}

TEST(RecordToFile, NoDriverIsUnavailableAndWritesNothing) {
  const std::string path = "/tmp/gs-record-nvml-" + std::to_string(::getpid()) + ".json";
  BackendOptions o;
  o.kind = "nvml";
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  Status s = RecordToFile(o, kSecond, kSecond, path, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace gpuslice::devices
