#pragma once
// The what-if's answer to "do we need more GPUs, or better use of the ones we have?": with
// every cure of the verdict's scenario applied, the fewest GPUs on which every queue's p95
// queueing delay stays within its target, found by replaying at other GPU counts (a bounded
// search: `search_steps` rounds, each of up to `threads` replays at once). It says how much
// of the history it rests on (measured share of held GPU-hours, unmeasured jobs), how the
// history does as recorded, and which single cure gave most back. Thread-safe over const inputs.

#include <string>
#include <vector>

#include "core/status.h"
#include "whatif/run.h"

namespace gpuslice::whatif {

struct Probe {
  int gpus = 0;
  bool meets = false;
  std::vector<QueueWaits> waits;
};

struct Verdict {
  // "fewer_gpus": the cured work fits on fewer; "enough": it needs what there is; "more_gpus":
  // it needs more; "more_than": more than the search went; "no_jobs".
  std::string code;
  std::string text;            // one paragraph
  int gpus_now = 0;
  int gpus_needed = 0;         // with every cure (more_than: the most tried)
  int resolution = 0;          // GPUs between the closest probes that met and missed (0: exact)
  bool recorded_meets = false; // as recorded, at today's GPUs
  double measured_percent = 0; // of the GPU-hours held as recorded, the measured share
  std::int64_t unmeasured_jobs = 0;
  std::string cures;           // what the cured scenario applied
  std::string best_cure;       // the single-cure scenario that gave most back ("" none)
  std::vector<Probe> probes;   // every GPU count tried with every cure, by GPU count
};

// `results`: RunScenarios' (the first is as-recorded).
Result<Verdict> Decide(const History& h, const WhatifSpec& spec, const std::vector<ScenarioResult>& results,
                       const RunOptions& o);

}  // namespace gpuslice::whatif
