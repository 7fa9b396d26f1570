#include "slurm/usage_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace gpuslice::slurm {

UsageRecorder::UsageRecorder(std::string path) : path_(std::move(path)) {}

std::string UsageRecorder::Header() {
  return "job_id,user,partition,gres,first_seen,last_seen,activity,memory_peak,reclaimed\n";
}

std::string UsageRecorder::Line(const UsageRecord& r) {
  return fmt::format("{},{},{},{},{},{},{},{},{}\n", sim::CsvQuote(r.job_id), sim::CsvQuote(r.user),
                     sim::CsvQuote(r.partition), sim::CsvQuote(r.gres), r.first_seen / kSecond,
                     r.last_seen / kSecond, sim::FormatActivity(r.activity),
                     r.memory_peak >= 0 ? std::to_string(r.memory_peak) : std::string(), r.reclaimed);
}

Status UsageRecorder::Write(const UsageRecord& r) {
  // One write() per line on an O_APPEND descriptor: lines of two agents (or of a crash) never
  // interleave. The header goes in when the file is new.
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable(fmt::format("usage log '{}': {}", path_, std::strerror(errno)));
  std::string text;
  if (::lseek(fd, 0, SEEK_END) == 0) text = Header();
  text += Line(r);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Unavailable(fmt::format("usage log '{}': write failed: {}", path_, n < 0 ? std::strerror(err) : "short write"));
  }
  return Status::Ok();
}

Status UsageRecorder::Observe(Micros now, const std::vector<Round>& jobs) {
  if (path_.empty()) return Status::Ok();
  std::set<std::string> here;
  for (const Round& j : jobs) {
    here.insert(j.job_id);
    auto [it, fresh] = open_.try_emplace(j.job_id);
    UsageRecord& r = it->second;
    if (fresh) {
      r.job_id = j.job_id;
      r.user = j.user;
      r.partition = j.partition;
      r.gres = j.gres;
      r.first_seen = r.last_seen = now;
    } else if (now > r.last_seen) {
      // This round's verdict stands for the time since the previous round.
      sim::ActivityRun run{now - r.last_seen, -1, sim::RunState::kUnknown};
      if (j.verdict == sched::Activity::kActive) {
        run.state = sim::RunState::kActive;
        if (j.permille) run.permille = static_cast<std::int16_t>(std::clamp(*j.permille, 0, 1000));
      } else if (j.verdict == sched::Activity::kIdle) {
        run.state = sim::RunState::kIdle;
      }
      sim::AppendRun(r.activity, run);
      r.last_seen = now;
    }
    if (j.memory) r.memory_peak = std::max(r.memory_peak, *j.memory);
  }
  Status st = Status::Ok();
  for (auto it = open_.begin(); it != open_.end();) {
    if (here.contains(it->first)) {
      ++it;
      continue;
    }
    if (Status w = Write(it->second); !w.ok() && st.ok()) st = w;
    it = open_.erase(it);
  }
  return st;
}

void UsageRecorder::MarkReclaimed(const std::string& job_id, std::string how) {
  if (auto it = open_.find(job_id); it != open_.end()) it->second.reclaimed = std::move(how);
}

Status UsageRecorder::Flush() {
  Status st = Status::Ok();
  for (const auto& [id, r] : open_) {
    if (Status w = Write(r); !w.ok() && st.ok()) st = w;
  }
  open_.clear();
  return st;
}

Result<UsageLog> ReadUsageLog(const std::string& path, const sim::ReadOptions& options) {
  GPUSLICE_ASSIGN_OR_RETURN(sim::CsvTable t, sim::CsvTable::Open(path, {"job_id", "first_seen", "last_seen", "activity"}));
  UsageLog log;
  auto read = [&]() -> Result<UsageRecord> {
    UsageRecord r;
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view id, t.Field("job_id"));
    if (id.empty()) return t.Error("job_id", id, "is empty");
    r.job_id = std::string(id);
    if (t.Has("user")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view u, t.Field("user"));
      r.user = std::string(u);
    }
    if (t.Has("partition")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view p, t.Field("partition"));
      r.partition = std::string(p);
    }
    if (t.Has("gres")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view g, t.Field("gres"));
      r.gres = std::string(g);
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::int64_t first, t.Int("first_seen", 0, sim::kMaxTraceTime / kSecond * 10));
    GPUSLICE_ASSIGN_OR_RETURN(std::int64_t last, t.Int("last_seen", 0, sim::kMaxTraceTime / kSecond * 10));
    if (last < first) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view l, t.Field("last_seen"));
      return t.Error("last_seen", l, "is before first_seen");
    }
    r.first_seen = first * kSecond;
    r.last_seen = last * kSecond;
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view a, t.Field("activity"));
    // Rounds are whole seconds apart at most by rounding: allow a second of slack per end.
    auto runs = sim::ParseActivity(a, r.last_seen - r.first_seen + 2 * kSecond);
    if (!runs.ok()) return t.Error("activity", a, "is not valid: " + runs.status().message());
    r.activity = std::move(runs).value();
    if (t.Has("memory_peak")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view m, t.Field("memory_peak"));
      if (!m.empty()) {
        GPUSLICE_ASSIGN_OR_RETURN(r.memory_peak, t.Int("memory_peak", 0, kMaxBytes));
      }
    }
    if (t.Has("reclaimed")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view how, t.Field("reclaimed"));
      if (!how.empty() && how != "cancel" && how != "requeue") return t.Error("reclaimed", how, "is not cancel or requeue");
      r.reclaimed = std::string(how);
    }
    return r;
  };
  while (t.Next()) {
    Result<UsageRecord> r = read();
    if (r.ok()) {
      log.records.push_back(std::move(r).value());
    } else if (options.skip_bad_rows) {
      log.skipped.Add(r.status());
    } else {
      return r.status();
    }
  }
  return log;
}

}  // namespace gpuslice::slurm
