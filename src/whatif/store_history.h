#pragma once
// A history from the daemon's store (store.h): every job submitted in the period that held a
// slice, as it ran (its last slice: kind, devices, share), with the activity its stored
// utilisation points show and the highest GPU memory they recorded.
//
// A stored point covers (time - span, time]: its `known` part was measured, of which `idle`
// was judged idle by the daemon's detector; the rest of the known part was busy at the point's
// level (a shared or MPS slice's level is its processes' share of the device, converted to a
// share of its slice). Where no point covers a stretch (the daemon was down, the last partial
// minute) the run is unknown. Precision is the store's resolution: 1 minute for two days,
// then 10 minutes, then an hour (docs/report.md) — finer than any reclaim window worth trying
// only for recent history.
// Free functions; thread-safe as the Store.

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "report/report.h"
#include "sched/config.h"
#include "sim/openb.h"
#include "store/store.h"
#include "whatif/history.h"

namespace gpuslice::whatif {

struct StoreHistoryOptions {
  report::Period period;              // jobs submitted in [from, to)
  sched::Config config;               // the daemon's
  std::vector<sim::TraceNode> nodes;  // empty: one node of the GPUs the store has seen, model "GPU"
  std::size_t max_jobs = 0;           // 0: all; else the most recently submitted this many
  std::string source;                 // for the document, e.g. "store /var/lib/gpuslice"
};

Result<History> HistoryFromStore(store::Store& store, const StoreHistoryOptions& o);

// The activity runs of one slice held over [from, to) from its stored points (any order);
// `level_scale_milli`: a point's utilisation is per mille of this share (1000: of what the
// slice holds; a shared slice's points are of the whole device, so its share). Also the
// highest memory used any point recorded (-1: none).
struct SliceActivity {
  std::vector<sim::ActivityRun> runs;
  Bytes memory_peak = -1;
};
SliceActivity ActivityFromPoints(std::vector<store::SampleRecord> points, Micros from, Micros to,
                                 MilliGpu level_scale_milli);

}  // namespace gpuslice::whatif
