#include "slurm/client.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>

#include "core/text.h"
#include "slurm/config_gen.h"
#include "slurm/process.h"
#include "slurm/teams_setup.h"

namespace gpuslice::slurm {
namespace {

using sched::SliceKind;

std::string Trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    parts.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string FirstLine(const std::string& s) {
  std::string t = Trim(s);
  auto nl = t.find('\n');
  return nl == std::string::npos ? t : t.substr(0, nl);
}

// True when Slurm's message means the controller (or the config source) cannot be reached.
bool LooksUnreachable(const std::string& err) {
  for (const char* needle : {"Unable to contact slurm controller", "Could not establish a configuration",
                             "Socket timed out", "Connection refused", "connect failure",
                             "Zero Bytes were transmitted", "Slurm temporarily unable"}) {
    if (err.find(needle) != std::string::npos) return true;
  }
  return false;
}

// Runs one Slurm command with the context's SLURM_CONF and deadline. A non-zero exit becomes
// an error carrying Slurm's own message; an unreachable controller becomes Unavailable.
Result<std::string> RunSlurm(const SlurmContext& ctx, std::vector<std::string> argv,
                             std::string stdin_text = "") {
  CommandSpec spec;
  if (!ctx.bin_dir.empty()) argv[0] = ctx.bin_dir + "/" + argv[0];
  spec.argv = std::move(argv);
  spec.env = ctx.env;
  if (!ctx.slurm_conf.empty()) spec.env["SLURM_CONF"] = ctx.slurm_conf;
  spec.stdin_text = std::move(stdin_text);
  spec.timeout = ctx.timeout;
  auto r = RunCommand(spec);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kDeadlineExceeded)
      return Unavailable(fmt::format("Slurm did not answer: {} (is slurmctld running?)", r.status().message()));
    if (r.status().code() == StatusCode::kUnavailable)
      return Unavailable(fmt::format("{} (is Slurm installed? see scripts/install-deps)", r.status().message()));
    return r.status();
  }
  if (r->exit_code != 0) {
    std::string msg = FirstLine(r->err.empty() ? r->out : r->err);
    std::string what = fmt::format("'{}' failed (exit {}): {}", ShellJoin(spec.argv), r->exit_code, msg);
    if (LooksUnreachable(r->err)) return Unavailable(fmt::format("Slurm is not reachable: {}", what));
    if (r->err.find("Invalid job id") != std::string::npos) return NotFound(what);
    if (r->err.find("nvalid partition") != std::string::npos) return NotFound(what);
    return Status(StatusCode::kFailedPrecondition, what);
  }
  return std::move(r->out);
}

std::string QueueNames(const sched::Config& policy) {
  std::string s;
  for (const auto& q : policy.queues) s += (s.empty() ? "" : ", ") + q.name;
  return s;
}

// The GRES a partition's nodes offer, summed over its node lines: name -> type -> count.
struct PartitionGres {
  int gpus = 0;                           // every gpu GRES, typed or not
  int shards = 0;
  int mps = 0;
  std::vector<std::pair<std::string, int>> typed_gpus;  // type -> per-node count
  int nodes_seen = 0;
};

Result<PartitionGres> QueryPartitionGres(const std::string& partition, const SlurmContext& ctx) {
  // One line per distinct node configuration; "%G" is e.g. "gpu:fake:2,shard:8" or
  // "gpu:3g.40gb:2(S:0),gpu:2g.20gb:4(S:0)".
  GPUSLICE_ASSIGN_OR_RETURN(std::string out, RunSlurm(ctx, {"sinfo", "-h", "-p", partition, "-o", "%G"}));
  PartitionGres pg;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    ++pg.nodes_seen;
    int line_gpus = 0, line_shards = 0, line_mps = 0;
    // Split on commas outside parentheses.
    std::vector<std::string> items;
    std::string cur;
    int depth = 0;
    for (char c : line) {
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (c == ',' && depth == 0) {
        items.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    items.push_back(cur);
    for (std::string item : items) {
      auto paren = item.find('(');
      if (paren != std::string::npos) item = item.substr(0, paren);
      auto f = Split(item, ':');
      if (f.size() < 2) continue;
      int count = 0;
      const std::string& n = f.back();
      if (std::from_chars(n.data(), n.data() + n.size(), count).ec != std::errc()) continue;
      if (f[0] == "gpu") {
        line_gpus += count;
        if (f.size() == 3) {
          auto it = std::find_if(pg.typed_gpus.begin(), pg.typed_gpus.end(),
                                 [&](const auto& t) { return t.first == f[1]; });
          if (it == pg.typed_gpus.end()) pg.typed_gpus.emplace_back(f[1], count);
        }
      } else if (f[0] == "shard") {
        line_shards += count;
      } else if (f[0] == "mps") {
        line_mps += count;
      }
    }
    // Shards per GPU must be the same on every node line; keep the smallest figures so that a
    // planned request fits every node.
    if (pg.nodes_seen == 1 || line_gpus < pg.gpus) pg.gpus = line_gpus;
    if (pg.nodes_seen == 1 || line_shards < pg.shards) pg.shards = line_shards;
    if (pg.nodes_seen == 1 || line_mps < pg.mps) pg.mps = line_mps;
  }
  if (pg.nodes_seen == 0)
    return NotFound(fmt::format("Slurm has no partition '{}' (install the config from `gpuslice slurm "
                                "config`, or check `sinfo`)", partition));
  return pg;
}

Result<SliceKind> ChooseKind(const SlurmSubmitRequest& r, const sched::QueueConfig& q) {
  int asked = (r.gpus ? 1 : 0) + (r.fraction ? 1 : 0) + (r.memory ? 1 : 0);
  if (asked > 1) return InvalidArgument("give only one of --gpus, --fraction, --memory");
  SliceKind kind = q.default_kind;
  if (r.gpus) kind = SliceKind::kWhole;
  if (r.fraction) kind = q.Allows(SliceKind::kShared) || !q.Allows(SliceKind::kMps) ? SliceKind::kShared
                                                                                      : SliceKind::kMps;
  if (r.memory) kind = SliceKind::kMig;
  if (r.kind) {
    // The amount given must suit the kind asked for (Slurm caps no memory of shards or mps
    // units: only a MIG instance is chosen by memory).
    const SliceKind k = *r.kind;
    const bool fits = r.gpus ? k == SliceKind::kWhole
                      : r.fraction ? k == SliceKind::kShared || k == SliceKind::kMps
                      : r.memory ? k == SliceKind::kMig
                                 : true;
    if (!fits)
      return InvalidArgument(fmt::format("--kind = {} does not go with {} on Slurm (--gpus: whole; --fraction: "
                                         "shared or mps; --memory: mig)",
                                         sched::SliceKindName(k),
                                         r.gpus ? "--gpus" : r.fraction ? "--fraction" : "--memory"));
    kind = k;
  }
  if (!q.Allows(kind))
    return InvalidArgument(fmt::format("queue '{}' does not allow {} slices", q.name, sched::SliceKindName(kind)));
  return kind;
}

}  // namespace

std::map<std::string, std::string> ParseScontrolRecord(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::string t = Trim(line);
    // Paths may contain spaces; these keys always sit alone on their line.
    bool whole_line = false;
    for (const char* key : {"StdOut=", "StdErr=", "StdIn=", "WorkDir=", "Command=", "Comment="}) {
      if (t.rfind(key, 0) == 0) {
        kv[std::string(key, std::strlen(key) - 1)] = t.substr(std::strlen(key));
        whole_line = true;
      }
    }
    if (whole_line) continue;
    std::istringstream words(t);
    std::string w;
    while (words >> w) {
      auto eq = w.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      kv[w.substr(0, eq)] = w.substr(eq + 1);
    }
  }
  return kv;
}

std::map<std::string, double> ParseJobUtilisation(const std::string& metrics_text) {
  std::map<std::string, double> util;
  std::istringstream lines(metrics_text);
  std::string line;
  const std::string metric = "gpuslice_slurm_job_gpu_utilization_percent{";
  while (std::getline(lines, line)) {
    if (line.rfind(metric, 0) != 0) continue;
    auto label = line.find("job_id=\"");
    auto close = line.find('}');
    if (label == std::string::npos || close == std::string::npos) continue;
    auto start = label + 8;
    auto end = line.find('"', start);
    std::string value = Trim(line.substr(close + 1));
    auto space = value.find(' ');
    if (space != std::string::npos) value = value.substr(0, space);
    try {
      util[line.substr(start, end - start)] = std::stod(value);
    } catch (...) {  // a malformed sample is skipped, not fatal: parsing edge
    }
  }
  return util;
}

Result<SlurmSubmission> PlanSlurmSubmission(const SlurmSubmitRequest& r) {
  const sched::Config& policy = r.policy;
  std::string queue_name = r.queue.empty() ? policy.default_queue : r.queue;
  const sched::QueueConfig* q = policy.FindQueue(queue_name);
  if (q == nullptr)
    return NotFound(fmt::format("queue '{}' is not in the policy (queues: {})", queue_name, QueueNames(policy)));
  if (r.command.empty()) return InvalidArgument("no command given (put it after --)");
  if (!r.team.empty() && !policy.teams.enabled())
    return InvalidArgument(fmt::format("--team '{}': the policy has no [teams] (give --policy with the site's config)",
                                       ForTerminal(r.team)));
  if (!r.team.empty() && policy.teams.Find(r.team) == nullptr)
    return NotFound(fmt::format("--team '{}': no such team in the policy's [teams]", ForTerminal(r.team)));
  if (r.borrow && !policy.teams.enabled())
    return InvalidArgument("--borrow: the policy has no [teams] (give --policy with the site's config)");
  if (r.borrow && !q->preemptible)
    return InvalidArgument(fmt::format("--borrow: queue '{}' is not preemptible: borrowed GPUs are taken back only "
                                       "in preemptible queues",
                                       q->name));
  GPUSLICE_ASSIGN_OR_RETURN(SliceKind kind, ChooseKind(r, *q));

  if (!r.model.empty() && kind != SliceKind::kWhole)
    return InvalidArgument(fmt::format("--model = {}: on Slurm only whole-GPU jobs choose the model (a {} "
                                       "slice's GRES is not typed by model)",
                                       r.model, sched::SliceKindName(kind)));
  SlurmSubmission s;
  s.partition = q->name;
  GPUSLICE_ASSIGN_OR_RETURN(PartitionGres pg, QueryPartitionGres(s.partition, r.slurm));
  switch (kind) {
    case SliceKind::kWhole: {
      int n = r.gpus.value_or(q->default_gpus);
      if (n < 1) return InvalidArgument(fmt::format("--gpus = {}: must be at least 1", n));
      if (n > pg.gpus)
        return InvalidArgument(fmt::format("--gpus = {}: partition '{}' has nodes with {} GPUs", n, s.partition, pg.gpus));
      s.gres = fmt::format("gpu:{}", n);
      if (!r.model.empty()) {
        // The typed gpu GRES `gpuslice slurm config --model` writes (the canonical name's type,
        // so an alias finds it too).
        Result<const DeviceModel*> m = FindModel(r.model);
        const std::string type = GresTypeForModel(m.ok() ? (*m)->name : r.model);
        auto it = std::find_if(pg.typed_gpus.begin(), pg.typed_gpus.end(),
                               [&](const auto& t) { return t.first == type; });
        if (it == pg.typed_gpus.end()) {
          std::vector<std::string> types;
          for (const auto& t : pg.typed_gpus) types.push_back(t.first);
          return InvalidArgument(fmt::format("--model = {}: partition '{}' has no gpu GRES of type '{}' (types: {})",
                                             r.model, s.partition, type,
                                             types.empty() ? "none" : fmt::format("{}", fmt::join(types, ", "))));
        }
        s.gres = fmt::format("gpu:{}:{}", type, n);
      }
      break;
    }
    case SliceKind::kShared:
    case SliceKind::kMps: {
      MilliGpu share = r.fraction.value_or(q->default_milli);
      if (share <= 0 || share > kOneGpu)
        return InvalidArgument(fmt::format(
            "--fraction = {}: a shared slice is more than 0 and at most one GPU (Slurm takes all "
            "of a job's shards from one GPU); ask for --gpus instead",
            FormatMilliGpu(share)));
      int units_total = kind == SliceKind::kShared ? pg.shards : pg.mps;
      if (units_total == 0 || pg.gpus == 0)
        return FailedPrecondition(fmt::format(
            "partition '{}' offers no gres/{} (is the config from `gpuslice slurm config` installed?)",
            s.partition, kind == SliceKind::kShared ? "shard" : "mps"));
      int per_gpu = units_total / pg.gpus;
      // Rounded up: a job never gets less than it asked for.
      std::int64_t units = (share * per_gpu + kOneGpu - 1) / kOneGpu;
      s.gres = fmt::format("{}:{}", kind == SliceKind::kShared ? "shard" : "mps", std::max<std::int64_t>(units, 1));
      break;
    }
    case SliceKind::kMig: {
      Bytes need = r.memory.value_or(q->default_memory);
      std::string best;
      Bytes best_mem = 0;
      for (const auto& [type, count] : pg.typed_gpus) {
        auto mem = MigProfileMemory(type);
        if (!mem.ok() || *mem < need) continue;
        if (best.empty() || *mem < best_mem) {
          best = type;
          best_mem = *mem;
        }
      }
      if (best.empty())
        return InvalidArgument(fmt::format("--memory = {}: partition '{}' has no MIG instance that large",
                                           FormatBytes(need), s.partition));
      s.gres = fmt::format("gpu:{}:1", best);
      break;
    }
  }

  Micros limit = q->EffectiveLimit(0);
  Micros time = limit;
  if (r.time) {
    if (*r.time <= 0) return InvalidArgument("--time: must be more than zero");
    if (limit > 0 && *r.time > limit)
      return InvalidArgument(fmt::format("--time = {}: over queue '{}''s limit of {}", FormatDuration(*r.time),
                                         q->name, FormatDuration(limit)));
    time = *r.time;
  }
  if (time > 0) s.time_limit = SlurmTimeLimit(time);

  std::string workdir = r.workdir;
  std::string output = r.output.empty() ? (workdir.empty() ? "" : workdir + "/") + "gpuslice-%j.out" : r.output;
  s.sbatch_args = {"sbatch", "--parsable", "--partition=" + s.partition, "--gres=" + s.gres,
                   "--job-name=" + (r.job_name.empty() ? "gpuslice-" + q->name : r.job_name),
                   "--output=" + output,
                   // Appending keeps the agent's warning lines and survives a requeue.
                   "--open-mode=append",
                   fmt::format("--comment=gpuslice queue={} kind={}", q->name, sched::SliceKindName(kind))};
  if (!s.time_limit.empty()) s.sbatch_args.push_back("--time=" + s.time_limit);
  if (!r.team.empty()) s.sbatch_args.push_back("--account=" + r.team);
  if (r.borrow) s.sbatch_args.push_back(std::string("--qos=") + kBorrowQos);
  if (!workdir.empty()) s.sbatch_args.push_back("--chdir=" + workdir);
  s.sbatch_args.insert(s.sbatch_args.end(), r.sbatch_extra.begin(), r.sbatch_extra.end());

  s.script = "#!/bin/sh\n";
  s.script += fmt::format("# gpuslice: queue={} kind={} gres={}\n", q->name, sched::SliceKindName(kind), s.gres);
  for (const auto& [k, v] : r.env) s.script += fmt::format("export {}={}\n", k, ShellQuote(v));
  // exec: the command is the job's process, so the agent attributes its GPU use directly.
  s.script += "exec " + ShellJoin(r.command) + "\n";
  return s;
}

Result<std::string> SubmitToSlurm(const SlurmSubmitRequest& r) {
  GPUSLICE_ASSIGN_OR_RETURN(SlurmSubmission s, PlanSlurmSubmission(r));
  GPUSLICE_ASSIGN_OR_RETURN(std::string out, RunSlurm(r.slurm, s.sbatch_args, s.script));
  // --parsable prints "<id>" or "<id>;<cluster>".
  std::string id = FirstLine(out);
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    return Internal(fmt::format("sbatch printed no job id: '{}'", Trim(out)));
  return id;
}

Result<std::vector<SlurmJobRow>> ListSlurmJobs(const ListOptions& o) {
  // '|' cannot appear in the fields before the name; the name is last and may contain it.
  std::vector<std::string> argv = {"squeue", "-h", "-o", "%i|%P|%u|%T|%M|%l|%b|%R|%j"};
  if (!o.partitions.empty()) {
    std::string p;
    for (const auto& x : o.partitions) p += (p.empty() ? "" : ",") + x;
    argv.insert(argv.end(), {"-p", p});
  }
  if (o.all_states) argv.insert(argv.end(), {"-t", "all"});
  GPUSLICE_ASSIGN_OR_RETURN(std::string out, RunSlurm(o.slurm, argv));
  std::map<std::string, double> util;
  for (const std::string& url : o.metrics_urls) {
    // http://host:port/path
    auto scheme = url.find("://");
    std::string rest = scheme == std::string::npos ? url : url.substr(scheme + 3);
    auto slash = rest.find('/');
    std::string host = rest.substr(0, slash);
    std::string path = slash == std::string::npos ? "/metrics" : rest.substr(slash);
    httplib::Client cli("http://" + host);
    cli.set_connection_timeout(1, 0);
    cli.set_read_timeout(2, 0);
    if (auto res = cli.Get(path.c_str()); res && res->status == 200) {
      for (const auto& [job, u] : ParseJobUtilisation(res->body)) util[job] = u;
    }
  }
  std::vector<SlurmJobRow> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (Trim(line).empty()) continue;
    auto f = Split(line, '|');
    if (f.size() < 9) continue;
    SlurmJobRow row{f[0], f[1], "", f[2], f[3], f[4], f[5], f[6], f[7], std::nullopt};
    std::string name = f[8];
    for (std::size_t i = 9; i < f.size(); ++i) name += "|" + f[i];
    row.name = name;
    if (auto it = util.find(row.job_id); it != util.end()) row.gpu_util_percent = it->second;
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::map<std::string, std::string>> ShowJob(const std::string& job_id, const SlurmContext& ctx) {
  GPUSLICE_ASSIGN_OR_RETURN(std::string out, RunSlurm(ctx, {"scontrol", "show", "job", job_id}));
  auto kv = ParseScontrolRecord(out);
  if (kv.count("JobId") == 0) return NotFound(fmt::format("Slurm job {} not found", job_id));
  return kv;
}

Status CancelJob(const std::string& job_id, const SlurmContext& ctx) {
  return RunSlurm(ctx, {"scancel", job_id}).status();
}

Status RequeueJob(const std::string& job_id, const SlurmContext& ctx) {
  return RunSlurm(ctx, {"scontrol", "requeue", job_id}).status();
}

Result<std::vector<std::string>> ListPartitions(const SlurmContext& ctx) {
  GPUSLICE_ASSIGN_OR_RETURN(std::string out, RunSlurm(ctx, {"sinfo", "-h", "-o", "%R"}));
  std::vector<std::string> names;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    line = Trim(line);
    if (!line.empty() && std::find(names.begin(), names.end(), line) == names.end()) names.push_back(line);
  }
  return names;
}

}  // namespace gpuslice::slurm
