#pragma once
// The one map from a Status to the gpuslice binary's exit code (README "Exit codes"), used by
// every subcommand and by `serve`, so the same failure exits the same way whatever reported it:
//   0 ok · 1 the operation failed · 2 bad command line or bad input · 3 not found ·
//   4 permission denied · 5 daemon, driver or Slurm unavailable (or too slow to answer).
// Free functions; thread-safe.

#include "core/status.h"

namespace gpuslice::api {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitDenied = 4;
inline constexpr int kExitUnavailable = 5;

int ExitCodeFor(StatusCode code);
inline int ExitCodeFor(const Status& st) { return ExitCodeFor(st.code()); }

}  // namespace gpuslice::api
