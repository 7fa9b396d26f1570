#include "devices/mps.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "devices/subprocess.h"

namespace gpuslice::devices {
namespace {

namespace fs = std::filesystem;

// Line `line` (0: the first) of a small file, "" when it has fewer lines.
std::string ReadSmall(const fs::path& p, int line = 0) {
  std::ifstream in(p);
  std::string s;
  for (int i = 0; i <= line; ++i) {
    if (!std::getline(in, s)) return "";
  }
  return s;
}

// The uid the marker names (its second line), if any.
std::optional<std::int64_t> MarkerUid(const std::string& pipe_dir) {
  const std::string text = ReadSmall(fs::path(pipe_dir) / MpsController::kMarkerFile, 1);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 10) return std::nullopt;
  return std::stoll(text);
}

std::string LogTail(const std::string& log_dir) {
  std::ifstream in(fs::path(log_dir) / "control.log");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  return last;
}

}  // namespace

std::string MpsMemLimit(Bytes b) {
  if (b % kGiB == 0) return fmt::format("{}G", b / kGiB);
  return fmt::format("{}M", (b + kMiB - 1) / kMiB);
}

MpsController::MpsController(std::string control_binary, Micros timeout)
    : binary_(std::move(control_binary)), timeout_(timeout) {}

Result<std::string> MpsController::Command(const std::string& pipe_dir, const std::string& command) {
  auto exe = FindExecutable(binary_);
  if (!exe.ok()) return Unavailable("MPS control binary unavailable: " + exe.status().message());
  RunOptions opt;
  opt.env = {{"CUDA_MPS_PIPE_DIRECTORY", pipe_dir}};
  opt.stdin_text = command + "\n";
  opt.timeout = timeout_;
  GPUSLICE_ASSIGN_OR_RETURN(auto r, RunProcess({*exe}, opt));
  if (r.exit_code != 0) {
    return Unavailable(fmt::format("mps '{}' on {}: exit {}: {}", command, pipe_dir, r.exit_code, r.output));
  }
  return r.output;
}

bool MpsController::Answers(const std::string& pipe_dir) {
  return Command(pipe_dir, "get_default_active_thread_percentage").ok();
}

MpsStatus MpsController::Probe(const std::string& pipe_dir) {
  MpsStatus st;
  st.pipe_dir = pipe_dir;
  const bool marker = fs::exists(fs::path(pipe_dir) / kMarkerFile);
  const bool up = fs::exists(pipe_dir) && Answers(pipe_dir);
  if (up) {
    st.state = MpsState::kRunning;
    st.control_pid = std::atoi(ReadSmall(fs::path(pipe_dir) / kPidFile).c_str());
    st.server_uid = MarkerUid(pipe_dir);
  } else if (marker) {
    st.state = MpsState::kDied;
    st.detail = "control daemon started by gpuslice no longer answers on " + pipe_dir;
  }
  return st;
}

Status MpsController::ApplyLimits(const MpsConfig& config) {
  // These set defaults for the next server the daemon spawns (lost on quit), which is why we
  // apply them right after the daemon starts, before any client connects.
  if (config.default_active_thread_percentage) {
    GPUSLICE_RETURN_IF_ERROR(
        Command(config.pipe_dir, fmt::format("set_default_active_thread_percentage {}",
                                             *config.default_active_thread_percentage))
            .status());
  }
  if (config.default_pinned_mem_limit) {
    // The daemon sees only its one device, as ordinal 0.
    GPUSLICE_RETURN_IF_ERROR(
        Command(config.pipe_dir, fmt::format("set_default_device_pinned_mem_limit 0 {}",
                                             MpsMemLimit(*config.default_pinned_mem_limit)))
            .status());
  }
  return Status::Ok();
}

Status MpsController::Start(const std::string& device, const MpsConfig& config) {
  if (config.pipe_dir.empty() || config.log_dir.empty()) {
    return InvalidArgument("mps: pipe_dir and log_dir must both be set");
  }
  if (config.default_active_thread_percentage &&
      (*config.default_active_thread_percentage < 1 || *config.default_active_thread_percentage > 100)) {
    return InvalidArgument(fmt::format("mps: active_thread_percentage {} must be 1..100",
                                       *config.default_active_thread_percentage));
  }
  if (config.default_pinned_mem_limit && *config.default_pinned_mem_limit < kMiB) {
    return InvalidArgument(fmt::format("mps: pinned_mem_limit {} must be at least 1MiB",
                                       *config.default_pinned_mem_limit));
  }
  if (config.server_uid && *config.server_uid < 0) {
    return InvalidArgument(fmt::format("mps: server uid {} is not a uid", *config.server_uid));
  }
  auto exe = FindExecutable(binary_);
  if (!exe.ok()) return Unavailable("MPS control binary unavailable: " + exe.status().message());
  std::error_code ec;
  fs::create_directories(config.pipe_dir, ec);
  if (ec) return Unavailable(fmt::format("mps: cannot create pipe dir {}: {}", config.pipe_dir, ec.message()));
  fs::create_directories(config.log_dir, ec);
  if (ec) return Unavailable(fmt::format("mps: cannot create log dir {}: {}", config.log_dir, ec.message()));

  if (Answers(config.pipe_dir)) {
    // Running already: for the same user it is a retry; for another, that user's clients would
    // wait at CUDA start-up until the server exits.
    const std::optional<std::int64_t> serving = MarkerUid(config.pipe_dir);
    if (config.server_uid && serving && *serving != *config.server_uid) {
      return FailedPrecondition(fmt::format("mps: the server on {} serves uid {}; a server serves one user at a "
                                            "time, so uid {} cannot use it until it stops",
                                            config.pipe_dir, *serving, *config.server_uid));
    }
  } else {
    RunOptions opt;
    opt.env = {{"CUDA_VISIBLE_DEVICES", device},
               {"CUDA_MPS_PIPE_DIRECTORY", config.pipe_dir},
               {"CUDA_MPS_LOG_DIRECTORY", config.log_dir}};
    opt.capture_output = false;  // -d forks a daemon that would hold our pipe open
    opt.timeout = timeout_;
    GPUSLICE_ASSIGN_OR_RETURN(auto r, RunProcess({*exe, "-d"}, opt));
    if (r.exit_code != 0) {
      return Unavailable(fmt::format("mps: '{} -d' for {} exited {}; control.log: {}", *exe, device,
                                     r.exit_code, LogTail(config.log_dir)));
    }
    // -d returns once forked; wait until the daemon answers on its pipe.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_);
    while (!Answers(config.pipe_dir)) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Unavailable(fmt::format("mps: daemon for {} did not answer on {}; control.log: {}", device,
                                       config.pipe_dir, LogTail(config.log_dir)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Marker first: if we crash between here and the limits, a retry re-applies them.
  {
    std::ofstream marker(fs::path(config.pipe_dir) / kMarkerFile);
    marker << device << "\n";
    if (config.server_uid) marker << *config.server_uid << "\n";
  }
  GPUSLICE_RETURN_IF_ERROR(ApplyLimits(config));
  if (!config.server_uid) return Status::Ok();
  // The defaults above apply to the next server spawned: this one, for the slice's user. A server
  // already running for that user (a retry) makes the command fail harmlessly: only its absence
  // afterwards is an error.
  auto started = Command(config.pipe_dir, fmt::format("start_server -uid {}", *config.server_uid));
  if (!started.ok()) {
    auto servers = Command(config.pipe_dir, "get_server_list");
    if (!servers.ok() || servers->find_first_of("0123456789") == std::string::npos) return started.status();
  }
  return Status::Ok();
}

Status MpsController::Stop(const std::string& pipe_dir) {
  if (pipe_dir.empty()) return InvalidArgument("mps: pipe_dir must be set");
  if (fs::exists(pipe_dir) && Answers(pipe_dir)) {
    GPUSLICE_RETURN_IF_ERROR(Command(pipe_dir, "quit").status());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_);
    while (Answers(pipe_dir)) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Unavailable(fmt::format("mps: daemon on {} still answers after quit", pipe_dir));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::error_code ec;
  fs::remove(fs::path(pipe_dir) / kMarkerFile, ec);
  return Status::Ok();
}

}  // namespace gpuslice::devices
