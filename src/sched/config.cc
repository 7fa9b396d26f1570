#include "sched/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/text.h"
#include "sched/config_reader.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

using config_internal::TableReader;

constexpr std::string_view kKindNames[] = {"whole", "mig", "mps", "shared"};

auto DurationParser() {
  return [](const std::string& t) { return ParseDuration(t); };
}
// A queue's default memory and its time limits obey the same bounds as a job's request
// (core/units.h), so a config cannot set what a submit could not ask for.
auto JobMemoryParser() {
  return [](const std::string& t) { return ParseJobMemory(t); };
}
auto TimeLimitParser() {
  return [](const std::string& t) { return ParseTimeLimit(t); };
}
auto GpuParser() {
  return [](const std::string& t) { return ParseGpuAmount(t); };
}

Status ReadIdle(TableReader& r, IdlePolicy& idle) {
  GPUSLICE_RETURN_IF_ERROR(r.Bool("enabled", idle.enabled));
  GPUSLICE_RETURN_IF_ERROR(r.Int("threshold", 0, 100, idle.util_threshold_percent));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("window", DurationParser(), false, idle.window));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("grace", DurationParser(), true, idle.grace));
  std::vector<std::string> signals;
  bool has_signals = r.Get("signals") != nullptr;
  GPUSLICE_RETURN_IF_ERROR(r.StringList("signals", signals));
  if (has_signals) {
    idle.activity = ActivitySignals{false, false, false};
    idle.report_sources.clear();
    bool gpu = false;  // some signal read from the GPU
    for (const std::string& s : signals) {
      if (s == "sm") idle.activity.sm_utilisation = gpu = true;
      else if (s == "memory") idle.activity.memory_traffic = gpu = true;
      else if (s == "processes") idle.activity.process_presence = gpu = true;
      // "gpu": the GPU rule as by default (SM utilisation and memory traffic).
      else if (s == "gpu") idle.activity.sm_utilisation = idle.activity.memory_traffic = gpu = true;
      else if (s == "jupyter") idle.report_sources.push_back(s);
      else
        return r.ErrorAt("signals", fmt::format("unknown activity signal '{}' (known: gpu, sm, memory, "
                                                "processes, jupyter)", s));
    }
    if (signals.empty()) return r.ErrorAt("signals", "at least one activity signal is needed");
    // Reports may only postpone a reclaim: without a GPU signal they would decide it alone.
    if (!gpu)
      return r.ErrorAt("signals", "a GPU signal (gpu, sm, memory or processes) is needed; reports "
                                  "such as 'jupyter' can only postpone a reclaim");
    std::sort(idle.report_sources.begin(), idle.report_sources.end());
    idle.report_sources.erase(std::unique(idle.report_sources.begin(), idle.report_sources.end()),
                              idle.report_sources.end());
  }
  GPUSLICE_RETURN_IF_ERROR(r.Bool("busy_is_active", idle.busy_is_active));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("busy_max", DurationParser(), true, idle.busy_max));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("report_stale", DurationParser(), false, idle.report_stale));
  std::string reclaim(IdleReclaimName(idle.reclaim));
  GPUSLICE_RETURN_IF_ERROR(r.String("reclaim", reclaim));
  if (reclaim == "always") idle.reclaim = IdleReclaim::kAlways;
  else if (reclaim == "on-demand") idle.reclaim = IdleReclaim::kOnDemand;
  else return r.ErrorAt("reclaim", fmt::format("'{}' is not one of: always, on-demand", reclaim));
  std::string action(ReclaimActionName(idle.action));
  GPUSLICE_RETURN_IF_ERROR(r.String("action", action));
  if (action == "reclaim") idle.action = ReclaimAction::kReclaim;
  else if (action == "report") idle.action = ReclaimAction::kReport;
  else return r.ErrorAt("action", fmt::format("'{}' is not one of: reclaim, report", action));
  return r.CheckUnknown(
      "enabled, threshold, window, grace, signals, action, busy_is_active, busy_max, report_stale, reclaim");
}

Status ReadQueue(TableReader& r, QueueConfig& q) {
  std::vector<std::string> kinds;
  bool has_kinds = r.Get("kinds") != nullptr;
  GPUSLICE_RETURN_IF_ERROR(r.StringList("kinds", kinds));
  if (has_kinds) {
    if (kinds.empty()) return r.ErrorAt("kinds", "at least one slice kind is needed");
    q.allowed_kinds.clear();
    for (const std::string& k : kinds) {
      auto kind = ParseSliceKind(k);
      if (!kind.ok()) return r.ErrorAt("kinds", kind.status().message());
      if (std::find(q.allowed_kinds.begin(), q.allowed_kinds.end(), *kind) == q.allowed_kinds.end())
        q.allowed_kinds.push_back(*kind);
    }
  }
  std::string def_kind(SliceKindName(q.default_kind));
  bool has_default_kind = r.Get("default_kind") != nullptr;
  GPUSLICE_RETURN_IF_ERROR(r.String("default_kind", def_kind));
  auto kind = ParseSliceKind(def_kind);
  if (!kind.ok()) return r.ErrorAt("default_kind", kind.status().message());
  q.default_kind = *kind;
  if (has_kinds && !has_default_kind) q.default_kind = q.allowed_kinds.front();
  if (!has_kinds && has_default_kind && !q.Allows(q.default_kind)) q.allowed_kinds.push_back(q.default_kind);

  GPUSLICE_RETURN_IF_ERROR(r.Unit("default_gpu", GpuParser(), false, q.default_milli));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("default_memory", JobMemoryParser(), true, q.default_memory));
  GPUSLICE_RETURN_IF_ERROR(r.Int("default_gpus", 1, 1024, q.default_gpus));
  GPUSLICE_RETURN_IF_ERROR(r.Int("priority", -1000000, 1000000, q.priority));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("time_limit", TimeLimitParser(), true, q.time_limit));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("max_duration", TimeLimitParser(), true, q.max_duration));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("warn_before", DurationParser(), true, q.warn_before));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("user_max_gpu", GpuParser(), true, q.user_max_milli));
  GPUSLICE_RETURN_IF_ERROR(r.Int("user_max_jobs", 0, 1000000, q.user_max_jobs));
  GPUSLICE_RETURN_IF_ERROR(r.String("placement", q.placement));
  GPUSLICE_RETURN_IF_ERROR(r.Bool("preemptible", q.preemptible));
  GPUSLICE_RETURN_IF_ERROR(r.Unit("reserve_after", DurationParser(), true, q.reserve_after));
  Status st;
  if (const toml::table* idle = r.SubTable("idle", st)) {
    TableReader ir(*idle, r.file(), r.Key("idle"));
    GPUSLICE_RETURN_IF_ERROR(ReadIdle(ir, q.idle));
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  return r.CheckUnknown(
      "kinds, default_kind, default_gpu, default_memory, default_gpus, priority, time_limit, "
      "max_duration, warn_before, user_max_gpu, user_max_jobs, placement, preemptible, reserve_after, idle");
}

}  // namespace

std::string_view ReclaimActionName(ReclaimAction action) {
  return action == ReclaimAction::kReclaim ? "reclaim" : "report";
}

std::string_view IdleReclaimName(IdleReclaim r) {
  return r == IdleReclaim::kAlways ? "always" : "on-demand";
}

bool IdlePolicy::CountsReports(std::string_view source) const {
  return std::find(report_sources.begin(), report_sources.end(), source) != report_sources.end();
}

std::string_view MigDrainPolicyName(MigDrainPolicy policy) {
  return policy == MigDrainPolicy::kWait ? "wait" : "preempt";
}

bool QueueConfig::Allows(SliceKind kind) const {
  return std::find(allowed_kinds.begin(), allowed_kinds.end(), kind) != allowed_kinds.end();
}

Micros QueueConfig::EffectiveLimit(Micros requested) const {
  Micros limit = 0;
  for (Micros l : {time_limit, max_duration, requested}) {
    if (l > 0 && (limit == 0 || l < limit)) limit = l;
  }
  return limit;
}

Micros QueueConfig::TimeLimitWarnLead(Micros limit) const {
  if (warn_before <= 0) return 0;
  if (limit <= 0) return warn_before;
  return std::min(warn_before, limit / 4);
}

const QueueConfig* Config::FindQueue(std::string_view name) const {
  for (const QueueConfig& q : queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

Config DefaultConfig() {
  Config c;
  QueueConfig interactive;
  interactive.name = "interactive";
  interactive.allowed_kinds = {SliceKind::kShared, SliceKind::kMps};
  interactive.default_kind = SliceKind::kShared;
  interactive.default_milli = 250;
  interactive.priority = 10;
  interactive.time_limit = 8 * kHour;
  interactive.warn_before = 15 * kMinute;
  interactive.idle = IdlePolicy{.enabled = true,
                                .util_threshold_percent = 5,
                                .window = 30 * kMinute,
                                .grace = 10 * kMinute,
                                .activity = {},
                                .action = ReclaimAction::kReclaim,
                                .report_sources = {}, .busy_is_active = true, .busy_max = 0,
                                .report_stale = 10 * kMinute, .reclaim = {}};
  interactive.placement = "gpuslice";
  interactive.preemptible = true;
  // A shared host's notebooks: one person may hold at most two GPUs' worth of slices in at
  // most eight sessions, so that nobody takes every slice while others wait (docs/config.md).
  interactive.user_max_milli = 2 * kOneGpu;
  interactive.user_max_jobs = 8;

  QueueConfig training;
  training.name = "training";
  training.allowed_kinds = {SliceKind::kWhole};
  training.default_kind = SliceKind::kWhole;
  training.default_milli = kOneGpu;
  training.default_gpus = 1;
  training.priority = 0;
  training.max_duration = 7 * 24 * kHour;
  training.warn_before = kHour;
  training.reserve_after = 30 * kMinute;
  training.idle = IdlePolicy{.enabled = true,
                             .util_threshold_percent = 10,
                             .window = kHour,
                             .grace = 0,
                             .activity = {},
                             .action = ReclaimAction::kReport,
                                .report_sources = {}, .busy_is_active = true, .busy_max = 0,
                                .report_stale = 10 * kMinute, .reclaim = {}};
  training.placement = "packing";

  QueueConfig inference;
  inference.name = "inference";
  inference.allowed_kinds = {SliceKind::kMig, SliceKind::kMps, SliceKind::kWhole};
  inference.default_kind = SliceKind::kMig;
  inference.default_milli = kOneGpu;
  inference.default_memory = 10 * kGiB;
  inference.priority = 20;
  inference.idle = IdlePolicy{.enabled = true,
                              .util_threshold_percent = 1,
                              .window = 6 * kHour,
                              .grace = 0,
                              .activity = {},
                              .action = ReclaimAction::kReport,
                                .report_sources = {}, .busy_is_active = true, .busy_max = 0,
                                .report_stale = 10 * kMinute, .reclaim = {}};
  inference.placement = "gpuslice";

  c.queues = {inference, interactive, training};  // sorted by name
  return c;
}

Status ValidateConfig(const Config& config) {
  if (config.queues.empty()) return InvalidArgument("queues: at least one queue is needed");
  std::vector<std::string> known = PolicyNames();
  for (std::size_t i = 0; i < config.queues.size(); ++i) {
    const QueueConfig& q = config.queues[i];
    std::string key = fmt::format("queues.{}", q.name);
    if (q.name.empty()) return InvalidArgument("queues: a queue has an empty name");
    for (std::size_t j = 0; j < i; ++j)
      if (config.queues[j].name == q.name) return InvalidArgument(fmt::format("{}: defined twice", key));
    if (q.allowed_kinds.empty()) return InvalidArgument(fmt::format("{}.kinds: empty", key));
    if (!q.Allows(q.default_kind))
      return InvalidArgument(fmt::format("{}.default_kind = '{}': not in kinds", key,
                                         SliceKindName(q.default_kind)));
    if (q.default_milli <= 0 || q.default_milli > kOneGpu)
      return InvalidArgument(fmt::format("{}.default_gpu = '{}': must be more than 0 and at most 1",
                                         key, FormatMilliGpu(q.default_milli)));
    if (q.default_gpus < 1) return InvalidArgument(fmt::format("{}.default_gpus = {}: must be at least 1", key, q.default_gpus));
    for (auto [name, v] : {std::pair{"time_limit", q.time_limit}, {"max_duration", q.max_duration},
                           {"warn_before", q.warn_before}, {"idle.window", q.idle.window},
                           {"idle.grace", q.idle.grace}, {"default_memory", q.default_memory},
                           {"idle.busy_max", q.idle.busy_max},
                           {"user_max_gpu", q.user_max_milli}, {"reserve_after", q.reserve_after}}) {
      if (v < 0) return InvalidArgument(fmt::format("{}.{} = {}: must not be negative", key, name, v));
    }
    // A warning due before the job could even start would be given at once, every time.
    if (const Micros limit = q.EffectiveLimit(0); q.warn_before > 0 && limit > 0 && q.warn_before >= limit)
      return InvalidArgument(fmt::format("{}.warn_before = '{}': not shorter than the queue's time limit ({}); the "
                                         "warning would come as the job starts", key, FormatDuration(q.warn_before),
                                         FormatDuration(limit)));
    if (q.user_max_jobs < 0)
      return InvalidArgument(fmt::format("{}.user_max_jobs = {}: must not be negative", key, q.user_max_jobs));
    if (q.idle.util_threshold_percent < 0 || q.idle.util_threshold_percent > 100)
      return InvalidArgument(fmt::format("{}.idle.threshold = {}: must be between 0 and 100", key,
                                         q.idle.util_threshold_percent));
    if (q.idle.enabled && q.idle.window <= 0)
      return InvalidArgument(fmt::format("{}.idle.window = 0: must be more than zero", key));
    if (q.idle.report_stale <= 0)
      return InvalidArgument(fmt::format("{}.idle.report_stale = {}: must be more than zero", key,
                                         q.idle.report_stale));
    for (const std::string& src : q.idle.report_sources) {
      if (src != "jupyter")
        return InvalidArgument(fmt::format("{}.idle.signals: unknown report source '{}' (known: jupyter)",
                                           key, src));
    }
    if (std::find(known.begin(), known.end(), q.placement) == known.end())
      return InvalidArgument(fmt::format("{}.placement = '{}': unknown placement policy (known: {})",
                                         key, q.placement, fmt::join(known, ", ")));
  }
  if (!config.FindQueue(config.default_queue))
    return InvalidArgument(fmt::format("default_queue = '{}': no such queue", config.default_queue));
  return config_internal::ValidateTeams(config);
}

namespace {
// [memory] and [memory.models.<name>]: byte figures with a unit ("768MiB"), 0 allowed, at most
// 64 GiB (more than any device's driver reserve or context).
Status ReadReserve(TableReader& r, MemoryReserve& out) {
  auto parse = [](const std::string& t) { return ParseBytesIn(t, 0, 64 * kGiB); };
  for (auto [key, field] : {std::pair{"driver_reserved", &out.driver_reserved},
                            std::pair{"context_reserve", &out.context_reserve}}) {
    if (r.Get(key) == nullptr) continue;
    Bytes v = 0;
    GPUSLICE_RETURN_IF_ERROR(r.Unit(key, parse, true, v));
    *field = v;
  }
  return Status::Ok();
}

}  // namespace

DeviceReserve MemoryReserveFor(const Config& config, const DeviceModel* model, std::optional<Bytes> driver_reported) {
  DeviceReserve out;
  if (model == nullptr) return out;
  const MemoryReserve* per_model = nullptr;
  if (auto it = config.memory.models.find(model->name); it != config.memory.models.end()) per_model = &it->second;
  std::string driver_from = "catalogue", context_from = "catalogue";
  out.driver_reserved = model->driver_reserved;
  out.context_reserve = model->context_reserve;
  if (driver_reported && *driver_reported >= 0) {
    out.driver_reserved = *driver_reported;
    driver_from = "driver";
  }
  // The config's entry for the model, else its [memory], overrides the figure.
  auto from_config = [&](std::optional<Bytes> MemoryReserve::*field, Bytes& figure, std::string& from) {
    const std::optional<Bytes>& set = per_model && per_model->*field ? per_model->*field : config.memory.all.*field;
    if (!set) return;
    figure = *set;
    from = "config";
  };
  from_config(&MemoryReserve::driver_reserved, out.driver_reserved, driver_from);
  from_config(&MemoryReserve::context_reserve, out.context_reserve, context_from);
  out.source = driver_from == context_from ? driver_from : driver_from + "/" + context_from;
  return out;
}

Result<Config> ParseConfig(std::string_view toml_text, std::string_view file_name) {
  std::string file(file_name);
  toml::table root;
  try {
    root = toml::parse(toml_text, file_name);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(fmt::format("{}:{}:{}: {}", file, e.source().begin.line,
                                       e.source().begin.column, e.description()));
  }
  Config config = DefaultConfig();
  TableReader r(root, file, "");
  GPUSLICE_RETURN_IF_ERROR(r.String("default_queue", config.default_queue));
  config.admin_group_from_file = root.contains("admin_group");
  GPUSLICE_RETURN_IF_ERROR(r.String("admin_group", config.admin_group));
  if (config.admin_group_from_file && config.admin_group.empty()) {
    // An empty name matched no group, silently: say so (without the key: 'gpuslice-admin').
    return r.ErrorAt("admin_group", "'' is empty: name the Unix group whose members may act on every job "
                                    "(or remove the key for the default, 'gpuslice-admin')");
  }
  Status st;
  if (const toml::table* mig = r.SubTable("mig", st)) {
    TableReader mr(*mig, file, "mig");
    GPUSLICE_RETURN_IF_ERROR(mr.Bool("enabled", config.mig.enabled));
    std::string drain(MigDrainPolicyName(config.mig.drain));
    GPUSLICE_RETURN_IF_ERROR(mr.String("drain", drain));
    if (drain == "wait") config.mig.drain = MigDrainPolicy::kWait;
    else if (drain == "preempt") config.mig.drain = MigDrainPolicy::kPreempt;
    else return mr.ErrorAt("drain", fmt::format("'{}' is not one of: wait, preempt", drain));
    GPUSLICE_RETURN_IF_ERROR(mr.CheckUnknown("enabled, drain"));
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* queues = r.SubTable("queues", st)) {
    // The file's queues replace the built-in set; a queue named like a built-in one starts
    // from the built-in values, so a file may override one key and keep the rest.
    const Config builtin = DefaultConfig();
    config.queues.clear();
    for (const auto& [name, node] : *queues) {
      std::string qname(name.str());
      if (!node.is_table())
        return InvalidArgument(fmt::format("{}: queues.{} = {}: expected a table", file, qname,
                                           TableReader::Render(node)));
      QueueConfig q;
      if (const QueueConfig* b = builtin.FindQueue(qname)) {
        q = *b;
      } else {
        q.allowed_kinds = {q.default_kind};
      }
      q.name = qname;
      TableReader qr(*node.as_table(), file, fmt::format("queues.{}", qname));
      GPUSLICE_RETURN_IF_ERROR(ReadQueue(qr, q));
      std::vector<std::string> names = PolicyNames();
      if (std::find(names.begin(), names.end(), q.placement) == names.end()) {
        return InvalidArgument(fmt::format(
            "{}: queues.{}.placement = '{}': unknown placement policy (known: {})", file, qname,
            q.placement, fmt::join(PolicyNames(), ", ")));
      }
      config.queues.push_back(std::move(q));
    }
    std::sort(config.queues.begin(), config.queues.end(),
              [](const QueueConfig& a, const QueueConfig& b) { return a.name < b.name; });
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* memory = r.SubTable("memory", st)) {
    TableReader mr(*memory, file, "memory");
    GPUSLICE_RETURN_IF_ERROR(ReadReserve(mr, config.memory.all));
    if (const toml::table* models = mr.SubTable("models", st)) {
      for (const auto& [name, node] : *models) {
        const std::string key(name.str());
        auto model = FindModel(key);
        if (!model.ok())
          return InvalidArgument(fmt::format("{}: memory.models.{}: {}", file, key, model.status().message()));
        if (!node.is_table())
          return InvalidArgument(fmt::format("{}: memory.models.{} = {}: expected a table", file, key,
                                             TableReader::Render(node)));
        TableReader pr(*node.as_table(), file, fmt::format("memory.models.{}", key));
        GPUSLICE_RETURN_IF_ERROR(ReadReserve(pr, config.memory.models[(*model)->name]));
        GPUSLICE_RETURN_IF_ERROR(pr.CheckUnknown("driver_reserved, context_reserve"));
      }
    }
    GPUSLICE_RETURN_IF_ERROR(st);
    GPUSLICE_RETURN_IF_ERROR(mr.CheckUnknown("driver_reserved, context_reserve, models"));
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* teams = r.SubTable("teams", st))
    GPUSLICE_RETURN_IF_ERROR(config_internal::ReadTeams(*teams, file, config.teams));
  GPUSLICE_RETURN_IF_ERROR(st);
  GPUSLICE_RETURN_IF_ERROR(r.CheckUnknown("default_queue, admin_group, mig, memory, queues, teams"));
  Status valid = ValidateConfig(config);
  if (!valid.ok()) return valid.WithContext(file);
  return config;
}

Result<Config> LoadConfigFile(const std::string& path) {
  // An ifstream "opens" a directory and reads nothing from it, which parsed as an empty file:
  // the built-in queues, silently. Only a regular file of sane size is a config.
  constexpr std::uintmax_t kMaxConfigBytes = 16 * 1024 * 1024;
  const std::string shown = EscapeInvalidUtf8(path);
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return NotFound(fmt::format("config file '{}': cannot be opened: {}", shown,
                                ec ? ec.message() : "no such file"));
  if (std::filesystem::is_directory(st))
    return InvalidArgument(fmt::format("config file '{}': is a directory, not a TOML file", shown));
  if (!std::filesystem::is_regular_file(st))
    return InvalidArgument(fmt::format("config file '{}': is not a regular file", shown));
  if (std::filesystem::file_size(path, ec) > kMaxConfigBytes || ec)
    return InvalidArgument(fmt::format("config file '{}': larger than 16MiB or unreadable", shown));
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("config file '{}': cannot be opened", shown));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return InvalidArgument(fmt::format("config file '{}': read error", shown));
  return ParseConfig(ss.str(), shown);
}

}  // namespace gpuslice::sched
