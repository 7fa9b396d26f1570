#pragma once
// Turning analyses and recordings into evidence, findings and the three outputs of
// `gpuslice profile`: a terminal report, report.json and timeline.svg. Also the command's
// logic (RunProfile), so apps/gpuslice/cmd_profile.cc stays a thin shell.
// Free functions; thread-compatible.

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "profile/analysis.h"
#include "profile/diagnosis.h"
#include "profile/recorder.h"

namespace gpuslice::profile {

// Several ranks: phase times are summed over ranks (so shares are averages weighted by step
// time), kernel figures likewise; memory is the highest peak of any rank.
Evidence EvidenceFromTraces(const std::vector<TraceAnalysis>& ranks);
// Step markers give the data-loading share; GPU busy is the mean NVML utilisation; workers
// are counted while stepping when there are markers.
Evidence EvidenceFromRecording(const Recording& rec);

std::string TraceReportText(const std::vector<TraceAnalysis>& ranks, const std::vector<Finding>& findings);
std::string RecordingReportText(const Recording& rec, const Evidence& e, const std::vector<Finding>& findings);

nlohmann::json FindingsJson(const std::vector<Finding>& findings);
nlohmann::json TraceReportJson(const std::vector<TraceAnalysis>& ranks, const std::vector<Finding>& findings);
nlohmann::json RecordingReportJson(const Recording& rec, const Evidence& e, const std::vector<Finding>& findings);

// SVG timelines: GPU utilisation over time, step boundaries and phase bands; self-contained,
// opens in any browser.
std::string TraceTimelineSvg(const std::vector<TraceAnalysis>& ranks);
std::string RecordingTimelineSvg(const Recording& rec);

struct ProfileOptions {
  std::vector<std::string> traces;   // --trace: analyse these (one per rank)
  std::vector<std::string> command;  // -- CMD...: run and record
  int pid = 0;                       // --pid: attach and record
  std::string job;                   // --job: what the daemon recorded for this job
  std::string socket;                // --socket for --job ("" : $GPUSLICE_SOCKET or default)
  std::string out_dir;               // --out: report.json + timeline.svg (+ steps.jsonl)
  Micros interval = 100 * kMillisecond;
  Micros duration = 0;               // --duration: stop recording after this long (0: never)
  std::string backend = "nvml";      // device layer backend kind for recording
  std::string simulate;              // --simulate SPEC: fake backend with this layout
  int simulate_util_permille = -1;   // --simulate-util: scripted utilisation for the fake GPU
  int device = 0;                    // --device: index to sample
  bool json_to_stdout = false;       // --json: print the JSON report instead of text
};

// `gpuslice profile --job`: the daemon's answer to GET /v1/jobs/ID/samples (docs/api.md) as a
// Recording with GPU figures only (utilisation, memory used and the slice's memory; no /proc
// data, no step markers). Malformed answers are an error naming the field.
Result<Recording> RecordingFromJobSamples(const nlohmann::json& body);
std::string JobReportText(const nlohmann::json& body, const Recording& rec, const Evidence& e,
                          const std::vector<Finding>& findings);

// Where gpuslice_steps.py lives: $GPUSLICE_PYTHON_DIR, else <exe dir>/../lib/python3/dist-packages
// (installed), else the source tree's python/ (build tree). Empty when none has it.
std::string FindPythonHelperDir();

// Does everything the command does; writes the report to `out`. Errors: bad input
// (InvalidArgument), missing device/driver (Unavailable), --job: no such job (NotFound), no
// daemon (Unavailable).
Status RunProfile(const ProfileOptions& options, std::ostream& out);

}  // namespace gpuslice::profile
