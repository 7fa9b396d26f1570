// Fuzzes the scheduler's TOML config (sched::ParseConfig), as `gpuslice serve --config`, `sim
// replay --config` and `slurm` load it: a file is accepted, with a config that drives a
// scheduler, or refused with an error; never a crash. toml++ parse errors are caught inside
// ParseConfig; nothing else is caught by production, so nothing else is caught here.
#include "fuzz/fuzz_util.h"
#include "sched/config.h"
#include "sched/scheduler.h"

namespace gpuslice::fuzz {
namespace {

// An accepted config must hold a scheduler up: a device, a default job in every queue, time.
void Drive(const sched::Config& config) {
  sched::Scheduler s(config, 42);
  const Micros t0 = 1'800'000'000LL * kSecond;  // 2027, like a real daemon's clock
  s.Handle(sched::DeviceAdded{t0, {NodeId(1), DeviceIndex(0)}, "GPU-0", "H100-80GB", true, false, {}});
  s.Handle(sched::DeviceAdded{t0, {NodeId(1), DeviceIndex(1)}, "GPU-1", "A100-40GB", true, false, {}});
  std::uint64_t id = 1;
  for (const sched::QueueConfig& q : config.queues) {
    s.Handle(sched::Submit{t0, JobId(id++), "alice", q.name, {}});
  }
  for (Micros dt : {kMinute, kHour, 30 * 24 * kHour}) s.Handle(sched::Tick{t0 + dt});
  Status inv = s.CheckInvariants();
  if (!inv.ok()) Fail(inv.ToString());
}

}  // namespace
}  // namespace gpuslice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  auto config = sched::ParseConfig(fuzz::AsText(data, size), "fuzz.toml");
  if (!config.ok()) {
    fuzz::TouchError(config.status());
    return 0;
  }
  Status valid = sched::ValidateConfig(*config);
  if (!valid.ok()) fuzz::Fail("ParseConfig accepted a config ValidateConfig refuses: " + valid.ToString());
  fuzz::Drive(*config);
  return 0;
}
