#pragma once
// How every subcommand ends: the exit code from the one map (api/exit_code.h, README "Exit
// codes"), and the error said once: as a line on stderr, or with --json as the API's error
// object on stdout ({"error": {"code": "NOT_FOUND", "message": "..."}}), so a script reading
// JSON gets JSON on failure too. Messages are made safe for the terminal (ForTerminal). Not
// thread-safe (writes to stdout/stderr).

#include <cstdio>
#include <iostream>
#include <string_view>

#include "api/cli.h"
#include "api/exit_code.h"
#include "api/protocol.h"
#include "core/status.h"

namespace gpuslice::cli {

inline int Finish(const Status& st, bool json = false, std::string_view prefix = "error") {
  if (st.ok()) return api::kExitOk;
  if (json) {
    std::cout << api::DumpJson(api::ErrorJson(st)) << "\n" << std::flush;
  } else {
    std::cerr << prefix << ": " << api::ErrorForTerminal(st) << "\n";
  }
  return api::ExitCodeFor(st);
}

}  // namespace gpuslice::cli
