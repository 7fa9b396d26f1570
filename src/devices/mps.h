#pragma once
// MpsController: starts, configures, probes and stops one nvidia-cuda-mps-control daemon per
// pipe directory (one per device, or per MIG device), by running the real control binary:
//   start:  CUDA_VISIBLE_DEVICES=<uuid> CUDA_MPS_PIPE_DIRECTORY=.. CUDA_MPS_LOG_DIRECTORY=..
//           nvidia-cuda-mps-control -d
//   probe:  echo get_default_active_thread_percentage | nvidia-cuda-mps-control  (exit 0 = up)
//   limits: set_default_active_thread_percentage N; set_default_device_pinned_mem_limit 0 NM
//   server: start_server -uid U   (MpsConfig::server_uid: the one user the server serves)
//   stop:   echo quit | nvidia-cuda-mps-control
// State lives on disk (a marker file in the pipe directory: the device, then the server's uid),
// so a restarted gpuslice sees a daemon it started before, whom it serves, and can tell
// "stopped" from "died". Every call is idempotent.
// Tests point `control_binary` at a script that speaks the same protocol.
// Stateless apart from configuration; thread-safe (different pipe dirs may be driven in
// parallel; calls on one pipe dir should be serialised by the caller).

#include <string>

#include "devices/backend.h"

namespace gpuslice::devices {

class MpsController {
 public:
  explicit MpsController(std::string control_binary = "nvidia-cuda-mps-control",
                         Micros timeout = 10 * kSecond);

  // `device` is what the daemon gets as CUDA_VISIBLE_DEVICES (GPU or MIG UUID).
  // Unavailable when the control binary is absent.
  Status Start(const std::string& device, const MpsConfig& config);
  Status Stop(const std::string& pipe_dir);
  MpsStatus Probe(const std::string& pipe_dir);

  // Sends one control command (e.g. "get_server_list"); returns its output.
  Result<std::string> Command(const std::string& pipe_dir, const std::string& command);

  static constexpr const char* kMarkerFile = "gpuslice-mps-started";
  static constexpr const char* kPidFile = "nvidia-cuda-mps-control.pid";

 private:
  Status ApplyLimits(const MpsConfig& config);
  bool Answers(const std::string& pipe_dir);

  std::string binary_;
  Micros timeout_;
};

// "10G"/"900M" as the MPS control syntax wants it (G only when it divides evenly).
std::string MpsMemLimit(Bytes b);

}  // namespace gpuslice::devices
