// Fuzzes the generic job-trace CSV reader (docs/sim.md) through ReadJobTrace, the entry point
// of `gpuslice sim replay` (it also routes openb pod lists by their header), read strictly and
// with --skip-bad-rows, then the per-policy configs the replay derives from the jobs.
// Production catches nothing around these, so neither does this target.
#include "fuzz/trace_checks.h"
#include "sim/replay.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string path = fuzz::WriteScratch("jobs.csv", fuzz::AsText(data, size));
  for (bool skip : {false, true}) {
    auto jobs = sim::ReadJobTrace(path, sim::ReadOptions{skip});
    if (!jobs.ok()) {
      fuzz::TouchError(jobs.status());
      continue;
    }
    fuzz::CheckJobs(*jobs);
    auto config = sim::ReplayConfig("best-fit", jobs->jobs);
    if (!config.ok()) {
      fuzz::TouchError(config.status());
      continue;
    }
    Status valid = sched::ValidateConfig(*config);
    if (!valid.ok()) fuzz::Fail("ReplayConfig made an invalid config: " + valid.ToString());
    Status st = sim::CheckQueues(jobs->jobs, *config, skip, jobs->skipped);
    if (!st.ok()) fuzz::TouchError(st);
  }
  return 0;
}
