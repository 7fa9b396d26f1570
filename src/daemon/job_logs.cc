// The daemon's lines in job logs, and the cap on a job's log (DaemonOptions::max_log_size).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

// Appends daemon lines to a job's log (created 0600, like the launcher's). In a log already
// cut at its cap they go right after the notice, and the cap makes room for them.
void Daemon::Impl::AppendToLog(JobId id, const std::string& path, const std::string& text) {
  auto lim = log_limit_.find(id);
  int fd = open(path.c_str(),
                O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (lim == log_limit_.end() ? O_APPEND : 0),
                0600);
  if (fd < 0) return;
  if (lim == log_limit_.end()) {
    (void)!write(fd, text.data(), text.size());
  } else {
    lim->second = WriteAt(fd, lim->second, text);
  }
  close(fd);
}

// Cuts the file at `at`, writes `text` there and cuts after it (whatever the job appended
// meanwhile goes); returns the new end. `fd` must not be O_APPEND (pwrite would append).
off_t Daemon::Impl::WriteAt(int fd, off_t at, const std::string& text) {
  (void)!ftruncate(fd, at);
  ssize_t w = pwrite(fd, text.data(), text.size(), at);
  off_t end = at + std::max<ssize_t>(w, 0);
  (void)!ftruncate(fd, end);
  return end;
}

// The cap on a job's log (DaemonOptions::max_log_size). The job writes its log directly (the
// fd is its stdout/stderr, opened O_APPEND), so the daemon cuts it: once it grows past the
// cap it is truncated to the cap and ends with a line saying so; what the job writes after
// that is cut again at every turn of the control loop. O_APPEND writers continue at the new
// end of file, so the job notices nothing. Why this and not the alternatives: a pipe drained
// by the daemon would break (SIGPIPE/EPIPE) or stall the job whenever the daemon restarts,
// and jobs outlive the daemon by design; RLIMIT_FSIZE on the job would cap every file it
// writes (checkpoints!), not its log. Bound: the cap plus what the job writes in one tick
// (and, while the daemon is down, until it is back: the first turn after a restart cuts).
void Daemon::Impl::EnforceLogCaps(store::WriteBatch& b) {
  if (opt_.max_log_size <= 0) return;
  for (const auto& [id, p] : procs_) {
    auto jt = jobs_.find(id);
    if (jt == jobs_.end() || jt->second.log_path.empty()) continue;
    const std::string& path = jt->second.log_path;
    struct stat sb {};
    if (stat(path.c_str(), &sb) != 0) continue;
    auto lim = log_limit_.find(id);
    const off_t limit = lim != log_limit_.end() ? lim->second : opt_.max_log_size;
    if (sb.st_size <= limit) continue;
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (lim != log_limit_.end()) {
      (void)!ftruncate(fd, limit);
    } else {
      // The first cut (or the first since a restart: it replaces the earlier notice).
      std::string note = fmt::format(
          "\n[gpuslice: log truncated at {} bytes (serve --max-log-size); further output is "
          "discarded]\n", opt_.max_log_size);
      log_limit_[id] = WriteAt(fd, opt_.max_log_size, note);
      AddEvent(b, id, "log", fmt::format("job {}: log truncated at {} bytes (serve --max-log-size)",
                                         id.value(), opt_.max_log_size));
    }
    close(fd);
  }
  std::erase_if(log_limit_, [&](const auto& e) { return !procs_.contains(e.first); });
}

void Daemon::Impl::AppendLog(JobId id, const std::string& line) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  AppendToLog(id, it->second.log_path, line + "\n");
}

}  // namespace gpuslice::daemon
