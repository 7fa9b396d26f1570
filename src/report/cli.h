#pragma once
// `gpuslice report`: asks the daemon (GET /v1/report) or, with --state-dir, reads a state
// directory's store itself, and prints the report as a table, JSON or CSV, with SVG plots
// under --out. Flags are checked before anything is asked, and errors name the flag and the
// value. Not thread-safe (writes to stdout).

#include <string>

#include "api/cli.h"
#include "core/status.h"

namespace gpuslice::report {

struct ReportFlags {
  std::string since;
  std::string from;
  std::string to;
  std::string by = "queue";
  bool csv = false;
  std::string out;        // directory for the SVG plots; "" : none
  std::string state_dir;  // "" : ask the daemon
};

Status RunReport(const api::ClientFlags& client, const ReportFlags& flags);

// The request target for GET /v1/report with these flags (values percent-encoded).
std::string ReportTarget(const ReportFlags& flags);

}  // namespace gpuslice::report
