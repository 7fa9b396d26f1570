// Config reloads (daemon.h, "config reloads"): the config in force is a scheduler event
// (sched::ConfigReload), journaled like any other, so a restart replays exactly the configs
// that were in force and when. The replay starts from the config recorded when the journal
// began (meta "journal_config"); a config edited while the daemon was down is applied at start
// as a reload.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_impl.h"
#include "sched/config_format.h"

namespace gpuslice::daemon {
namespace {

constexpr char kBaseConfigKey[] = "journal_config";

std::string Shown(const std::string& source) {
  return source.empty() ? "the built-in queues" : source;
}

}  // namespace

Status Daemon::Impl::InitBaseConfig() {
  GPUSLICE_ASSIGN_OR_RETURN(auto text, store_->GetMeta(kBaseConfigKey));
  if (!text) {
    base_config_ = config_;
    return store_->PutMeta(kBaseConfigKey, sched::FormatConfig(config_));
  }
  auto base = sched::ParseConfig(*text, std::string("the store's ") + kBaseConfigKey);
  if (!base.ok()) return Status(StatusCode::kDataLoss, base.status().message());
  base_config_ = std::move(base).value();
  return Status::Ok();
}

void Daemon::Impl::ApplyConfigAtStart(store::WriteBatch& b, Actions& act) {
  const Micros now = Now();
  if (!(sched_->config() == config_)) {
    const sched::QueueChanges c = sched::CompareQueues(sched_->config(), config_);
    spdlog::info("config {} differs from the one in force when the daemon stopped ({}): applied "
                 "as a reload", sched::ConfigVersion(config_), sched::ConfigVersion(sched_->config()));
    AddEvent(b, JobId(), "config",
             fmt::format("config {} from {} differs from the one in force at the last stop; "
                         "queues added: [{}], removed: [{}], changed: [{}]",
                         sched::ConfigVersion(config_), Shown(opt_.config_source),
                         fmt::join(c.added, ", "), fmt::join(c.removed, ", "), fmt::join(c.changed, ", ")));
    Feed(sched::ConfigReload{now, config_}, b, act);
  }
  NoteConfig(now, opt_.config_source);
  LogConfig("at start");
}

void Daemon::Impl::NoteConfig(Micros now, const std::string& source) {
  config_version_ = sched::ConfigVersion(config_);
  config_source_ = source;
  config_loaded_at_ = now;
}

// Every queue's settings, one line each, and what the file leaves out.
void Daemon::Impl::LogConfig(std::string_view why) const {
  spdlog::info("config {} from {} in force {}:", config_version_, Shown(config_source_), why);
  for (const std::string& line : sched::DescribeConfig(config_)) spdlog::info("  {}", line);
  // A file lists the complete set of queues (docs/config.md): a built-in queue it leaves out
  // is not offered, said here so that leaving one out is never silent.
  std::vector<std::string> left_out;
  for (const sched::QueueConfig& q : sched::DefaultConfig().queues) {
    if (config_.FindQueue(q.name) == nullptr) left_out.push_back(q.name);
  }
  if (!left_out.empty()) {
    spdlog::warn("  built-in queue(s) {} not in {}: not offered (a config's [queues] tables are "
                 "the complete list)", fmt::join(left_out, ", "), Shown(config_source_));
  }
}

Result<Json> Daemon::Impl::Reconfigure(sched::Config config, const std::string& source) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  GPUSLICE_RETURN_IF_ERROR(sched::ValidateConfig(config).WithContext(source + ": "));
  const Micros now = Now();
  const sched::QueueChanges c = sched::CompareQueues(config_, config);
  Json answer;
  if (config == config_) {
    spdlog::info("reload: {} is unchanged (config {} in force since {})", Shown(source),
                 config_version_, config_loaded_at_);
    config_source_ = source;
  } else {
    // Jobs of the queues the file no longer has: they finish under those queues' settings.
    std::map<std::string, std::pair<int, int>> left;  // queue -> (running, pending)
    for (const auto& [id, j] : jobs_) {
      if (store::IsTerminal(j.state) || config.FindQueue(j.queue) != nullptr) continue;
      auto& [running, pending] = left[j.queue];
      (j.state == JobState::kPending ? pending : running) += 1;
    }
    store::WriteBatch b;
    Actions act;
    const std::string before = config_version_;
    // The memory set aside per GPU is fixed (and journaled) when the daemon first finds the GPU
    // (recovery.cc): it is never moved under slices already cut, not even at a restart.
    if (!(config.memory == config_.memory)) {
      spdlog::warn("reload: [memory] in {} changed: it applies to GPUs found from now on; the GPUs "
                   "already known keep the memory set aside when they were found", Shown(source));
    }
    config_ = std::move(config);
    NoteConfig(now, source);
    std::string removed;
    for (const std::string& q : c.removed) {
      auto [running, pending] = left[q];
      removed += fmt::format("{}{} ({} running, {} pending: they finish under its last settings)",
                             removed.empty() ? "" : "; ", q, running, pending);
      spdlog::warn("reload: queue '{}' is not in {}: it takes no new jobs; its {} running and {} "
                   "pending jobs finish under its last settings", q, Shown(source), running, pending);
    }
    AddEvent(b, JobId(), "config",
             fmt::format("config {} from {} replaces {}; queues added: [{}], removed: [{}], "
                         "changed: [{}]", config_version_, Shown(source), before,
                         fmt::join(c.added, ", "), removed, fmt::join(c.changed, ", ")));
    Feed(sched::ConfigReload{now, config_}, b, act);
    GPUSLICE_RETURN_IF_ERROR(CommitAndAct(b, act));
    LaunchReady();  // jobs the new queues let start
    LogConfig("after reload");
  }
  answer = ConfigInfoLocked();
  answer["added"] = c.added;
  answer["removed"] = c.removed;
  answer["changed"] = c.changed;
  return answer;
}

Json Daemon::Impl::ConfigInfo() const {
  std::shared_lock lock(mu_);
  return ConfigInfoLocked();
}

Json Daemon::Impl::ConfigInfoLocked() const {
  Json names = Json::array();
  for (const auto& q : config_.queues) names.push_back(q.name);
  // Removed queues that still have jobs (their last settings apply to those).
  std::set<std::string> retired;
  for (const auto& [id, j] : jobs_) {
    if (!store::IsTerminal(j.state) && config_.FindQueue(j.queue) == nullptr) retired.insert(j.queue);
  }
  return Json{{"version", config_version_}, {"loaded_at_us", config_loaded_at_},
              {"source", config_source_}, {"queues", names},
              {"retired_queues", Json(std::vector<std::string>(retired.begin(), retired.end()))},
              {"text", sched::FormatConfig(config_)}};
}

}  // namespace gpuslice::daemon
