#include "whatif/sacct_history.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <set>
#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "core/text.h"
#include "slurm/config_gen.h"
#include "slurm/usage_log.h"

namespace gpuslice::whatif {
namespace {

// The dump's lines and columns; errors name file:line, the column and the value.
class Dump {
 public:
  static Result<Dump> Open(const std::string& path) {
    std::ifstream in(path);
    if (!in) return NotFound(fmt::format("{}: cannot open the sacct dump", EscapeInvalidUtf8(path)));
    Dump d;
    d.path_ = path;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      d.lines_.push_back(std::move(line));
    }
    if (d.lines_.empty()) return InvalidArgument(fmt::format("{}: empty (expected sacct --parsable2 output)", EscapeInvalidUtf8(path)));
    const std::vector<std::string> head = Split(d.lines_[0]);
    for (std::size_t i = 0; i < head.size(); ++i) d.columns_[head[i]] = i;
    for (const char* c : {"JobID", "Partition", "Submit", "Start", "End", "State"}) {
      if (!d.columns_.contains(c)) {
        return InvalidArgument(fmt::format("{}:1: no column '{}' (expected sacct --parsable2 with --format=JobID,User,"
                                           "Partition,Submit,Start,End,State,AllocTRES[,Comment])", EscapeInvalidUtf8(path), c));
      }
    }
    return d;
  }
  static std::vector<std::string> Split(const std::string& line) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (true) {
      const std::size_t bar = line.find('|', at);
      out.push_back(line.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
    return out;
  }
  bool Next() {
    while (++row_ < lines_.size()) {
      if (lines_[row_].empty()) continue;
      fields_ = Split(lines_[row_]);
      return true;
    }
    return false;
  }
  bool Has(const char* column) const { return columns_.contains(column); }
  std::string Field(const char* column) const {
    auto it = columns_.find(column);
    if (it == columns_.end() || it->second >= fields_.size()) return "";
    return fields_[it->second];
  }
  Status Error(const char* column, std::string_view value, std::string_view why) const {
    return InvalidArgument(fmt::format("{}:{}: column '{}': value '{}' {}", EscapeInvalidUtf8(path_), row_ + 1, column,
                                       EscapeInvalidUtf8(value), why));
  }
  std::size_t line() const { return row_ + 1; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> lines_;
  std::size_t row_ = 0;
  std::map<std::string, std::size_t> columns_;
  std::vector<std::string> fields_;
};

// "2026-12-01T10:00:00" in the local time zone; nullopt for Unknown / None / empty.
Result<std::optional<Micros>> Time(const Dump& d, const char* column) {
  const std::string v = d.Field(column);
  if (v.empty() || v == "Unknown" || v == "None") return std::optional<Micros>();
  std::tm tm{};
  std::istringstream in(v);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail() || in.peek() != EOF) return d.Error(column, v, "is not a time like 2026-12-01T10:00:00");
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return d.Error(column, v, "is not a time like 2026-12-01T10:00:00");
  return std::optional<Micros>(static_cast<Micros>(t) * kSecond);
}

struct Gres {
  sched::SliceKind kind = sched::SliceKind::kWhole;
  int gpus = 0;           // 0: no GPU
  MilliGpu milli = 0;     // per GPU
  Bytes memory = 0;       // MIG: the instance's memory
  std::string profile;    // MIG
};

// squeue's tres-per-node ("gres:shard:2", "gres:gpu:3g.40gb:1", "gres/gpu:2") in TRES form
// ("gres/shard=2", "gres/gpu:3g.40gb=1").
std::string TresOfGres(const std::string& gres) {
  std::string out;
  std::size_t at = 0;
  while (at < gres.size()) {
    std::size_t comma = gres.find(',', at);
    if (comma == std::string::npos) comma = gres.size();
    std::string item = gres.substr(at, comma - at);
    at = comma + 1;
    if (item.rfind("gres:", 0) == 0 || item.rfind("gres/", 0) == 0) item = item.substr(5);
    const std::size_t last = item.rfind(':');
    if (last == std::string::npos) continue;
    out += (out.empty() ? "" : ",") + std::string("gres/") + item.substr(0, last) + "=" + item.substr(last + 1);
  }
  return out;
}

Result<Gres> ParseTres(const Dump& d, const char* column, const std::string& tres, int shards_per_gpu) {
  Gres g;
  int whole = 0, shards = 0, mps = 0;
  std::size_t at = 0;
  while (at <= tres.size()) {
    const std::size_t comma = tres.find(',', at);
    const std::string item = tres.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? tres.size() + 1 : comma + 1;
    const std::size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key.rfind("gres/", 0) != 0) continue;
    int n = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || p != value.data() + value.size() || n < 0 || n > 100000) {
      return d.Error(column, tres, fmt::format("has '{}', not a count", item));
    }
    if (key == "gres/gpu") whole = n;
    else if (key == "gres/shard") shards = n;
    else if (key == "gres/mps") mps = n;
    else if (key.rfind("gres/gpu:", 0) == 0 && n > 0) {
      const std::string type = key.substr(9);
      if (auto mem = slurm::MigProfileMemory(type); mem.ok()) {
        g.kind = sched::SliceKind::kMig;
        g.profile = type;
        g.memory = *mem;
      }
    }
  }
  if (g.kind == sched::SliceKind::kMig) {
    g.gpus = 1;
    g.milli = kOneGpu;
  } else if (whole > 0) {
    g.gpus = whole;
    g.milli = kOneGpu;
  } else if (shards > 0) {
    g.kind = sched::SliceKind::kShared;
    g.gpus = 1;
    g.milli = std::min<MilliGpu>(kOneGpu, static_cast<MilliGpu>(shards) * kOneGpu / shards_per_gpu);
  } else if (mps > 0) {
    g.kind = sched::SliceKind::kMps;
    g.gpus = 1;
    g.milli = std::min<MilliGpu>(kOneGpu, static_cast<MilliGpu>(mps) * 10);
  }
  return g;
}

// The compute share of a MIG profile on the cluster's models ("3g.40gb": 3 of 7 slices).
MilliGpu MigShare(const std::string& profile) {
  int slices = 0;
  auto [p, ec] = std::from_chars(profile.data(), profile.data() + profile.size(), slices);
  (void)p;
  if (ec != std::errc() || slices <= 0) return kOneGpu;
  return std::min<MilliGpu>(kOneGpu, static_cast<MilliGpu>(slices) * kOneGpu / 7);
}

}  // namespace

Result<History> HistoryFromSacct(const std::string& dump, const std::string& usage_path, std::vector<sim::TraceNode> nodes,
                                 std::optional<sched::Config> config, const SacctOptions& o) {
  if (o.shards_per_gpu < 1 || o.shards_per_gpu > 1000) {
    return InvalidArgument(fmt::format("--shards-per-gpu {}: expected 1..1000", o.shards_per_gpu));
  }
  GPUSLICE_ASSIGN_OR_RETURN(Dump d, Dump::Open(dump));
  std::unordered_map<std::string, std::vector<slurm::UsageRecord>> usage;
  History h;
  h.source = "sacct " + dump;
  h.nodes = std::move(nodes);
  if (!usage_path.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(slurm::UsageLog log, slurm::ReadUsageLog(usage_path, o.read));
    if (log.skipped.count > 0) {
      h.notes.push_back(fmt::format("skipped {} bad line(s) of {}; first: {}", log.skipped.count, usage_path,
                                    log.skipped.first_errors.front()));
    }
    for (slurm::UsageRecord& r : log.records) usage[r.job_id].push_back(std::move(r));
    h.source += " + " + usage_path;
  }
  sim::SkippedRows skipped;
  std::int64_t never = 0, steps = 0, cpu_only = 0, measured = 0;
  Micros first = INT64_MAX, last = 0;
  std::map<std::string, std::set<sched::SliceKind>> kinds_seen;
  struct Row {
    HistoryJob hj;
    Micros start = 0;
    const std::vector<slurm::UsageRecord>* usage = nullptr;
  };
  std::vector<Row> rows;
  std::unordered_map<std::string, std::size_t> row_of;
  std::int64_t requeued = 0;
  auto read = [&]() -> Result<std::optional<Row>> {
    const std::string id = d.Field("JobID");
    if (id.empty()) return d.Error("JobID", id, "is empty");
    if (id.find('.') != std::string::npos) {
      ++steps;
      return std::optional<Row>();
    }
    GPUSLICE_ASSIGN_OR_RETURN(auto submit, Time(d, "Submit"));
    GPUSLICE_ASSIGN_OR_RETURN(auto start, Time(d, "Start"));
    GPUSLICE_ASSIGN_OR_RETURN(auto end, Time(d, "End"));
    if (!submit) return d.Error("Submit", d.Field("Submit"), "is unknown");
    if (submit) first = std::min(first, *submit), last = std::max(last, *submit);
    if (end) last = std::max(last, *end);
    if (start) last = std::max(last, *start);
    if (!start) {
      ++never;
      return std::optional<Row>();
    }
    if (*start < *submit) return d.Error("Start", d.Field("Start"), "is before Submit");
    if (end && *end < *start) return d.Error("End", d.Field("End"), "is before Start");
    GPUSLICE_ASSIGN_OR_RETURN(Gres g, ParseTres(d, "AllocTRES", d.Field("AllocTRES"), o.shards_per_gpu));
    auto u = usage.find(id);
    if (g.gpus == 0 && u != usage.end()) {
      // No GPU TRES in the dump (Slurm keeps it only with slurmdbd): what the agent saw it hold.
      for (const slurm::UsageRecord& r : u->second) {
        if (r.gres.empty()) continue;
        auto from_usage = ParseTres(d, "AllocTRES", TresOfGres(r.gres), o.shards_per_gpu);
        if (!from_usage.ok()) {
          return InvalidArgument(fmt::format("{}: job {}: column 'gres': value '{}' is not a GRES list such as "
                                             "gres:gpu:2", EscapeInvalidUtf8(usage_path), EscapeInvalidUtf8(id),
                                             EscapeInvalidUtf8(r.gres)));
        }
        g = *from_usage;
        break;
      }
    }
    if (g.gpus == 0) {
      ++cpu_only;
      return std::optional<Row>();
    }
    Row row;
    HistoryJob& hj = row.hj;
    sim::ReplayJob& j = hj.job;
    j.id = id;
    j.where = fmt::format("{}:{}", d.path(), d.line());
    j.user = d.Field("User");
    j.user = j.user.substr(0, j.user.find('('));  // "alice(1000)" from a jobcomp log
    std::string queue = d.Field("Partition");
    queue = queue.substr(0, queue.find(','));
    const std::string comment = d.Field("Comment");
    if (comment.rfind("gpuslice ", 0) == 0) {
      std::istringstream words(comment.substr(9));
      for (std::string w; words >> w;) {
        if (w.rfind("queue=", 0) == 0) queue = w.substr(6);
      }
    }
    j.queue = queue;
    j.kind = g.kind;
    j.submit = *submit;
    j.request.num_gpus = g.gpus;
    j.request.milli_per_gpu = g.milli;
    if (g.kind == sched::SliceKind::kMig) j.request.gpu_memory_per_gpu = g.memory;
    hj.held_milli = g.kind == sched::SliceKind::kMig ? MigShare(g.profile) : g.milli * g.gpus;
    const std::string state = d.Field("State");
    if (state == "RUNNING" || !end) hj.ended = RecordedEnd::kRunning;
    else if (state == "TIMEOUT") hj.ended = RecordedEnd::kTimeLimit;
    row.start = *start;
    j.duration = end ? *end - *start : -1;  // running: until the dump's last time (below)
    if (u != usage.end()) row.usage = &u->second;
    kinds_seen[queue].insert(g.kind);
    return std::optional<Row>(std::move(row));
  };
  while (d.Next()) {
    auto r = read();
    if (!r.ok()) {
      if (!o.read.skip_bad_rows) return r.status();
      skipped.Add(r.status());
      continue;
    }
    if (!*r) continue;
    // A requeued job has a line per run: its last run is what ran to the end.
    if (auto seen = row_of.find((*r)->hj.job.id); seen != row_of.end()) {
      ++requeued;
      if ((*r)->start >= rows[seen->second].start) rows[seen->second] = std::move(**r);
      continue;
    }
    row_of[(*r)->hj.job.id] = rows.size();
    rows.push_back(std::move(**r));
  }
  if (rows.empty()) return InvalidArgument(fmt::format("{}: no job that held a GPU", EscapeInvalidUtf8(dump)));
  h.from = first;
  h.to = last;
  for (Row& row : rows) {
    HistoryJob& hj = row.hj;
    sim::ReplayJob& j = hj.job;
    if (j.duration < 0) j.duration = std::max<Micros>(0, last - row.start);
    // The agent's runs, each record at its place on the job's timeline; unknown between.
    Micros cursor = 0;
    if (row.usage != nullptr) {
      std::vector<const slurm::UsageRecord*> recs;
      for (const slurm::UsageRecord& u : *row.usage) recs.push_back(&u);
      std::sort(recs.begin(), recs.end(), [](auto* a, auto* b) { return a->first_seen < b->first_seen; });
      ++measured;
      for (const slurm::UsageRecord* u : recs) {
        if (u->reclaimed == "cancel") hj.ended = RecordedEnd::kIdleReclaimed;
        hj.memory_peak = std::max(hj.memory_peak, u->memory_peak);
        Micros at = std::max(u->first_seen - row.start, cursor);
        if (at > cursor) sim::AppendRun(j.activity, sim::ActivityRun{std::min(at, j.duration) - cursor, -1, sim::RunState::kUnknown});
        cursor = std::min(at, j.duration);
        Micros off = u->first_seen - row.start;
        for (sim::ActivityRun run : u->activity) {
          const Micros a = std::max(off, cursor), b = std::min(off + run.length, j.duration);
          off += run.length;
          if (b <= a) continue;
          run.length = b - a;
          if (run.permille >= 0) {
            // Levels are of one GPU; the history's are of the share the job held.
            run.permille = static_cast<std::int16_t>(std::min<std::int64_t>(1000, static_cast<std::int64_t>(run.permille) * kOneGpu / std::max<MilliGpu>(hj.held_milli, 1)));
          }
          sim::AppendRun(j.activity, run);
          cursor = b;
        }
      }
    }
    if (cursor < j.duration) sim::AppendRun(j.activity, sim::ActivityRun{j.duration - cursor, -1, sim::RunState::kUnknown});
    j.tag = static_cast<std::uint32_t>(h.jobs.size());
    h.jobs.push_back(std::move(hj));
  }
  if (config) {
    h.config = std::move(*config);
  } else {
    sched::Config c;
    c.default_queue = h.jobs.front().job.queue;
    for (const auto& [name, kinds] : kinds_seen) {
      sched::QueueConfig q;
      q.name = name;
      q.allowed_kinds = {sched::SliceKind::kWhole, sched::SliceKind::kShared, sched::SliceKind::kMps, sched::SliceKind::kMig};
      q.default_kind = sched::SliceKind::kWhole;
      q.placement = "gpuslice";
      c.queues.push_back(std::move(q));
    }
    GPUSLICE_RETURN_IF_ERROR(sched::ValidateConfig(c));
    h.config = std::move(c);
    h.notes.push_back("no --config: each partition is a queue with no time limit and no idle policy");
  }
  if (skipped.count > 0) {
    h.notes.push_back(fmt::format("skipped {} bad line(s) of {}; first: {}", skipped.count, dump, skipped.first_errors.front()));
  }
  if (requeued > 0) h.notes.push_back(fmt::format("{} earlier runs of requeued jobs: their last runs replayed", requeued));
  if (never > 0) h.notes.push_back(fmt::format("{} jobs never started in the dump: not replayed", never));
  if (cpu_only > 0) h.notes.push_back(fmt::format("{} jobs held no GPU: not replayed", cpu_only));
  h.notes.push_back(usage_path.empty()
                        ? std::string("no --slurm-usage: no job's utilisation is known (every job counts as unknown)")
                        : fmt::format("{} of {} jobs have utilisation from the agent's usage log", measured, h.jobs.size()));
  return h;
}

}  // namespace gpuslice::whatif
