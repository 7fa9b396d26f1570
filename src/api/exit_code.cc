#include "api/exit_code.h"

namespace gpuslice::api {

int ExitCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kPermissionDenied: return kExitDenied;
    // Nothing answered, or not in time: the daemon, the driver or Slurm is unavailable.
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded: return kExitUnavailable;
    default: return kExitFailure;
  }
}

}  // namespace gpuslice::api
