// Fuzzes the recording format (docs/recording-format.md) as the replay backend reads it
// (`--backend replay:FILE`, `gpuslice profile` of a recording): ReadRecordingFile via
// ReplayBackend::OpenFile, then the backend played back over the recording's time span, and the
// recording written out again. The reader catches nlohmann's parse errors itself; production
// catches nothing else, nor does this target.
#include <limits>

#include <nlohmann/json.hpp>

#include "devices/recording.h"
#include "devices/replay.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string path = fuzz::WriteScratch("recording.json", fuzz::AsText(data, size));
  Micros now = 0;
  auto backend = devices::ReplayBackend::OpenFile(path, [&now] { return now; });
  if (!backend.ok()) {
    fuzz::TouchError(backend.status());
    return 0;
  }
  auto devs = (*backend)->ListDevices();
  if (!devs.ok()) fuzz::Fail("ListDevices of a recording failed: " + devs.status().ToString());
  const Micros start = (*backend)->start_time();
  for (Micros dt : {Micros{0}, kSecond, kHour, 24 * kHour}) {
    now = start > std::numeric_limits<Micros>::max() - dt ? start : start + dt;
    for (const auto& d : *devs) {
      auto s = (*backend)->Sample(d.index);
      if (!s.ok()) fuzz::TouchError(s.status());
    }
  }
  // What was read can be written back and read again.
  auto rec = devices::ReadRecordingFile(path);
  if (!rec.ok()) fuzz::Fail("a recording readable by the replay backend is not readable: " + rec.status().ToString());
  std::string again = devices::ToJson(*rec).dump(1);
  auto back = devices::RecordingFromJson(nlohmann::json::parse(again));
  if (!back.ok()) fuzz::Fail("a recording does not read back what it wrote: " + back.status().ToString());
  return 0;
}
