// The online replay goes through sched::Scheduler: a queue's per-user cap, idle reclaim, time
// limits and MIG placement from a real scheduler config shape what happens in simulated time.
// Every replay here also checks the Scheduler's invariants after every event.
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "sim/generic_trace.h"
#include "sim/replay.h"
#include "sim/replay_command.h"

namespace gpuslice::sim {
namespace {

using ::testing::HasSubstr;

ReplayJob Job(std::string queue, std::string user, double submit_s, double duration_s, MilliGpu milli,
              double utilisation = -1, int gpus = 1) {
  ReplayJob j;
  j.id = queue + "-" + user + "-" + std::to_string(submit_s);
  j.queue = std::move(queue);
  j.user = std::move(user);
  j.submit = static_cast<Micros>(submit_s * kSecond);
  j.duration = static_cast<Micros>(duration_s * kSecond);
  j.request.num_gpus = gpus;
  j.request.milli_per_gpu = milli;
  j.utilisation = utilisation;
  return j;
}

sched::Config Toml(const std::string& text) {
  auto c = sched::ParseConfig(text, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : sched::DefaultConfig();
}

ReplayResult Replay(const Cluster& cluster, const std::vector<ReplayJob>& jobs, const sched::Config& config,
                 std::uint64_t seed = 1) {
  const auto shapes = ReplayShapes(jobs);
  ReplayResult r = RunReplay(cluster, jobs, config, "t", shapes, {.seed = seed, .check_invariants = true});
  EXPECT_EQ(r.invariant_error, "");
  return r;
}

const Cluster kEightGpus = Cluster::Uniform(1, 8, "H100-80GB", 128000, 1024 * kGiB);

TEST(ReplayThroughScheduler, PerUserJobCapLimitsConcurrency) {
  // Plenty of GPUs, but alice may run one job at a time in "dev": her three 10 s jobs run one
  // after another (delays 0, 10, 20 s); bob is not held back by alice's cap.
  const std::string toml = R"(
default_queue = "dev"
[queues.dev]
kinds = ["shared", "whole"]
default_kind = "shared"
user_max_jobs = 1
)";
  std::vector<ReplayJob> jobs = {Job("dev", "alice", 0, 10, 250), Job("dev", "alice", 0, 10, 250),
                                 Job("dev", "alice", 0, 10, 250), Job("dev", "bob", 0, 10, 250)};
  ReplayResult capped = Replay(kEightGpus, jobs, Toml(toml));
  EXPECT_EQ(capped.started, 4);
  EXPECT_EQ(capped.rejected, 0);
  ASSERT_EQ(capped.delays.size(), 4u);
  EXPECT_EQ(capped.delays, (std::vector<Micros>{0, 0, 10 * kSecond, 20 * kSecond}));
  // The same trace without the cap: no waiting at all.
  std::string uncapped_toml = toml;
  uncapped_toml.replace(uncapped_toml.find("user_max_jobs = 1"), 17, "user_max_jobs = 0");
  ReplayResult free = Replay(kEightGpus, jobs, Toml(uncapped_toml));
  EXPECT_EQ(free.delays, (std::vector<Micros>{0, 0, 0, 0}));
}

TEST(ReplayThroughScheduler, IdleJobIsReclaimedBusyJobIsNot) {
  // Two 2 h jobs of a quarter GPU in an interactive queue reclaiming after 30 min idle + 10 min
  // grace: the one at 0% utilisation is warned at 30 min and reclaimed at 40 min; the one at 80%
  // runs its 2 h. A job of unknown utilisation counts as busy.
  const std::string toml = R"(
default_queue = "interactive"
[queues.interactive]
idle = { enabled = true, threshold = 5, window = "30m", grace = "10m", action = "reclaim" }
)";
  std::vector<ReplayJob> jobs = {Job("interactive", "a", 0, 7200, 250, 0.0), Job("interactive", "b", 0, 7200, 250, 0.8),
                                 Job("interactive", "c", 0, 7200, 250)};
  ReplayResult r = Replay(kEightGpus, jobs, Toml(toml));
  EXPECT_EQ(r.started, 3);
  EXPECT_EQ(r.reclaimed, 1);
  EXPECT_EQ(r.finished, 2);
  EXPECT_EQ(r.warnings, 1);
  // Held: 0.25 GPU x 40 min (reclaimed) + 2 x 0.25 GPU x 2 h; used: 80% of b's 0.5 GPU-h.
  EXPECT_NEAR(r.gpu_hours_held, 0.25 * 40.0 / 60 + 2 * 0.25 * 2, 1e-9);
  EXPECT_NEAR(r.gpu_hours_held_known, 0.25 * 40.0 / 60 + 0.25 * 2, 1e-9);
  EXPECT_NEAR(r.gpu_hours_used, 0.8 * 0.25 * 2, 1e-9);

  // With reclaim off ("report"), the idle job is warned but keeps its GPU for its 2 h.
  std::string report = toml;
  report.replace(report.find("\"reclaim\""), 9, "\"report\"");
  ReplayResult rep = Replay(kEightGpus, jobs, Toml(report));
  EXPECT_EQ(rep.reclaimed, 0);
  EXPECT_EQ(rep.finished, 3);
  EXPECT_EQ(rep.warnings, 1);
  EXPECT_NEAR(rep.gpu_hours_held, 3 * 0.25 * 2, 1e-9);
}

TEST(ReplayThroughScheduler, JobLongerThanTheTimeLimitIsStoppedAtTheLimit) {
  // A 1 h limit: the 3 h job is stopped at 1 h (and warned 10 min before), the 30 min job
  // finishes. A job waiting behind the stopped one starts when it is stopped, at 1 h.
  const std::string toml = R"(
default_queue = "batch"
[queues.batch]
kinds = ["whole"]
default_kind = "whole"
time_limit = "1h"
warn_before = "10m"
)";
  const Cluster one = Cluster::Uniform(1, 1, "H100-80GB", 128000, 1024 * kGiB);
  std::vector<ReplayJob> jobs = {Job("batch", "a", 0, 3 * 3600, 1000), Job("batch", "b", 1, 1800, 1000)};
  ReplayResult r = Replay(one, jobs, Toml(toml));
  EXPECT_EQ(r.time_limited, 1);
  EXPECT_EQ(r.finished, 1);
  EXPECT_EQ(r.warnings, 1);
  ASSERT_EQ(r.delays.size(), 2u);
  EXPECT_EQ(r.delays[1], kHour - kSecond);  // b: submitted at 1 s, started at the limit
  EXPECT_NEAR(r.gpu_hours_held, 1.0 + 0.5, 1e-9);
}

TEST(ReplayThroughScheduler, InferenceQueuePlacesOnMigInstances) {
  // The built-in inference queue (MIG, 10 GiB) on one A100-80GB: the Scheduler lays out MIG
  // instances (acknowledged after the fixed 2 s simulated delay) and the jobs run on them.
  const Cluster a100 = Cluster::Uniform(1, 1, "A100-80GB", 128000, 1024 * kGiB);
  std::vector<ReplayJob> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(Job("inference", "svc", 0, 600, 1000));
    jobs.back().request.gpu_memory_per_gpu = 10 * kGiB;
  }
  ReplayResult r = Replay(a100, jobs, sched::DefaultConfig());
  EXPECT_EQ(r.started, 3);
  EXPECT_EQ(r.mig_slices, 3);
  EXPECT_GE(r.reconfigurations, 1);
  EXPECT_EQ(r.rejected, 0);
  ASSERT_EQ(r.delays.size(), 3u);
  EXPECT_EQ(r.delays[0], 2 * kSecond);  // waited for the reconfiguration
  // A 1g.10gb instance on an A100-80GB is 1/7 of the GPU (142m): held = 3 x 142m x 10 min.
  EXPECT_NEAR(r.gpu_hours_held, 3 * 0.142 * 600 / 3600, 1e-9);

  // The same jobs on a GPU without MIG (unknown to the catalogue) can never run: rejected.
  ReplayResult none = Replay(Cluster::Uniform(1, 1, "GPU", 128000, 1024 * kGiB), jobs, sched::DefaultConfig());
  EXPECT_EQ(none.rejected, 3);
  EXPECT_EQ(none.mig_slices, 0);
}

TEST(ReplayThroughScheduler, TraceRowsMapToTheQueuesKinds) {
  const sched::Config builtin = sched::DefaultConfig();
  const sched::QueueConfig& inference = *builtin.FindQueue("inference");
  const sched::QueueConfig& training = *builtin.FindQueue("training");
  const sched::QueueConfig& interactive = *builtin.FindQueue("interactive");
  struct Case {
    const sched::QueueConfig* queue;
    int gpus;
    MilliGpu milli;
    sched::SliceKind kind;
    int want_gpus;
    MilliGpu want_milli;
  };
  const Case cases[] = {
      {&inference, 1, 1000, sched::SliceKind::kMig, 1, 1000},   // the queue's default kind
      {&inference, 2, 1000, sched::SliceKind::kWhole, 2, 0},    // several GPUs: whole, allowed there
      {&training, 1, 250, sched::SliceKind::kWhole, 1, 0},      // whole-only: a fraction holds one GPU
      {&training, 4, 1000, sched::SliceKind::kWhole, 4, 0},
      {&interactive, 1, 500, sched::SliceKind::kShared, 1, 500},
      {&interactive, 2, 1000, sched::SliceKind::kShared, 2, 1000},  // not allowed: the Scheduler rejects
  };
  for (const Case& c : cases) {
    ReplayJob j = Job(c.queue->name, "u", 0, 1, c.milli, -1, c.gpus);
    j.request.allowed_models = {"NVIDIA H100 80GB HBM3"};
    sched::JobRequest r = ToJobRequest(j, *c.queue);
    SCOPED_TRACE(c.queue->name + " " + std::to_string(c.gpus) + "x" + std::to_string(c.milli));
    ASSERT_TRUE(r.kind.has_value());
    EXPECT_EQ(*r.kind, c.kind);
    EXPECT_EQ(r.gpus, c.want_gpus);
    EXPECT_EQ(r.milli, c.want_milli);
    EXPECT_EQ(r.model, "H100-80GB");  // a catalogue alias becomes the canonical name
  }
  // A model list (openb's gpu_spec) or an unknown model is dropped: any model.
  ReplayJob j = Job("training", "u", 0, 1, 1000);
  j.request.allowed_models = {"V100M16", "V100M32"};
  EXPECT_EQ(ToJobRequest(j, training).model, "");
  j.request.allowed_models = {"G2"};
  EXPECT_EQ(ToJobRequest(j, training).model, "");
}

std::vector<ReplayJob> MixedTrace(int n) {
  std::vector<ReplayJob> jobs;
  for (int i = 0; i < n; ++i) {
    const MilliGpu milli = i % 3 == 0 ? 1000 : (i % 3 == 1 ? 250 : 500);
    jobs.push_back(Job("default", "u" + std::to_string(i % 4), i * 7 % 50, 30 + i * 13 % 200, milli, (i % 5) / 4.0,
                       milli == 1000 ? 1 + i % 4 : 1));
  }
  return jobs;
}

TEST(ReplayThroughScheduler, SameSeedSameResult) {
  // The "random" placement draws from the Scheduler's seeded RNG: same seed, same run.
  std::vector<ReplayJob> jobs = MixedTrace(300);
  auto config = ReplayConfig("random", jobs);
  ASSERT_TRUE(config.ok());
  const Cluster c = Cluster::Uniform(4, 8, "GPU", 128000, 1024 * kGiB);
  ReplayResult a = Replay(c, jobs, *config, 7);
  ReplayResult b = Replay(c, jobs, *config, 7);
  EXPECT_GT(a.started, 0);
  EXPECT_GT(a.delays.back(), 0);  // the cluster is busy enough for queueing
  EXPECT_EQ(a.delays, b.delays);
  EXPECT_EQ(a.decisions, b.decisions);
  ASSERT_EQ(a.series.size(), b.series.size());
  for (std::size_t i = 0; i < a.series.size(); ++i) {
    EXPECT_EQ(a.series[i].alloc_pct, b.series[i].alloc_pct);
    EXPECT_EQ(a.series[i].frag_pct, b.series[i].frag_pct);
  }
  EXPECT_EQ(a.gpu_hours_held, b.gpu_hours_held);
  // Another seed places differently (fragmentation differs somewhere).
  ReplayResult other = Replay(c, jobs, *config, 8);
  bool differs = false;
  for (std::size_t i = 0; i < std::min(a.series.size(), other.series.size()); ++i)
    differs = differs || a.series[i].frag_pct != other.series[i].frag_pct;
  EXPECT_TRUE(differs);
}

TEST(ReplayThroughScheduler, UnknownQueueNamesRowAndValueOrIsCounted) {
  const auto path = (std::filesystem::temp_directory_path() / "gpuslice_replay_queue.csv").string();
  std::ofstream(path) << "submit,duration,gpus,queue\n0,10,1,training\n1,10,1,nosuch\n2,10,1,\n";
  auto list = ReadGenericJobs(path);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  const sched::Config config = sched::DefaultConfig();
  std::vector<ReplayJob> jobs = list->jobs;
  SkippedRows skipped;
  Status st = CheckQueues(jobs, config, false, skipped);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr(path + ":3: column 'queue': value 'nosuch'"));
  EXPECT_THAT(st.message(), HasSubstr("inference, interactive, training"));
  jobs = list->jobs;
  ASSERT_TRUE(CheckQueues(jobs, config, true, skipped).ok());
  EXPECT_EQ(jobs.size(), 2u);
  EXPECT_EQ(skipped.count, 1);
  // Without a config file every queue of the trace exists (placed with the chosen policy).
  auto own = ReplayConfig("best-fit", list->jobs);
  ASSERT_TRUE(own.ok());
  EXPECT_NE(own->FindQueue("nosuch"), nullptr);
  EXPECT_EQ(own->FindQueue("nosuch")->placement, "best-fit");
  EXPECT_FALSE(ReplayConfig("no-such-policy", list->jobs).ok());
}

TEST(ReplayThroughScheduler, CommandUsesTheConfigFile) {
  // `sim replay --config`: the file's idle policy reclaims the idle job; the summary and CSV say so.
  const auto dir = std::filesystem::temp_directory_path() / "gpuslice_replay_cmd";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "jobs.csv") << "submit,duration,gpus,queue,user,utilisation\n"
                                     "0,2h,250m,interactive,alice,0\n0,2h,250m,interactive,bob,50\n"
                                     "0,30m,2,training,carol,90\n";
  std::ofstream(dir / "g.toml") << "[queues.interactive]\nidle = { window = \"15m\", grace = \"5m\" }\n"
                                   "[queues.training]\n";
  ReplayCommandOptions o;
  o.trace = (dir / "jobs.csv").string();
  o.cluster = "1x4:H100-80GB";
  o.config = (dir / "g.toml").string();
  o.out_dir = (dir / "out").string();
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].policy, "config");
  EXPECT_EQ((*r)[0].reclaimed, 1);
  EXPECT_EQ((*r)[0].started, 3);
  EXPECT_THAT(out.str(), HasSubstr("reclaimed"));
  std::ifstream summary(dir / "out" / "replay_summary.csv");
  std::string header, row;
  std::getline(summary, header);
  std::getline(summary, row);
  EXPECT_THAT(header, HasSubstr("reclaimed_idle,time_limited"));
  EXPECT_THAT(row, HasSubstr("config,3,3,0,0,2,1,0,"));  // jobs,started,rejected,waiting,finished,reclaimed,limited
  // A queue the file does not define is an error naming the row.
  std::ofstream(dir / "g2.toml") << "default_queue = \"training\"\n[queues.training]\n";
  o.config = (dir / "g2.toml").string();
  auto bad = RunReplayCommand(o, out, err);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("jobs.csv:2: column 'queue': value 'interactive'"));
}

TEST(ReplayThroughScheduler, TeamsAreReportedPerTeamAndTwoConfigsCompare) {
  // Four GPUs. vision (alice) fills them at 0 with four 4-hour jobs and queues four more; nlp
  // (bob) asks for two 1-hour GPUs at 10 minutes. Today nlp is guaranteed nothing and waits for
  // vision's first jobs to end; with 2 GPUs guaranteed in the (preemptible) queue, it takes two
  // back at once, and vision's two newest are requeued.
  const auto dir = std::filesystem::temp_directory_path() / "gpuslice_replay_teams";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string trace = "submit,duration,gpus,queue,user\n";
  for (int i = 0; i < 8; ++i) trace += "0,4h,1,training,alice\n";
  trace += "10m,1h,1,training,bob\n10m,1h,1,training,bob\n0,1h,1,training,dave\n";
  std::ofstream(dir / "jobs.csv") << trace;
  const std::string base = R"(
default_queue = "training"
[queues.training]
kinds = ["whole"]
preemptible = true
reserve_after = "0"
[teams.vision]
members = ["alice"]
[teams.nlp]
members = ["bob"]
)";
  std::ofstream(dir / "today.toml") << base;
  std::ofstream(dir / "nlp2.toml") << base << "guarantee = { training = 2 }\n";
  ReplayCommandOptions o;
  o.trace = (dir / "jobs.csv").string();
  o.cluster = "1x4:H100-80GB";
  o.config = (dir / "today.toml").string();
  o.compare_config = (dir / "nlp2.toml").string();
  o.out_dir = (dir / "out").string();
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  const ReplayResult& today = (*r)[0];
  const ReplayResult& nlp2 = (*r)[1];
  EXPECT_EQ(nlp2.policy, "compare");
  ASSERT_EQ(today.teams.size(), 3u) << "the config's teams (by name), and the jobs of no team";
  ASSERT_EQ(nlp2.teams.size(), 3u);
  for (const ReplayResult* x : {&today, &nlp2}) {
    EXPECT_EQ(x->teams[0].team, "nlp");
    EXPECT_EQ(x->teams[1].team, "vision");
    EXPECT_EQ(x->teams[2].team, "");
    EXPECT_EQ(x->teams[2].started, 1) << "dave's job, in no team";
    EXPECT_EQ(x->teams[0].started, 2);
    EXPECT_EQ(x->teams[1].started, 8);
  }
  const TeamReplayFigures &nlp_today = today.teams[0], &vision_today = today.teams[1];
  const TeamReplayFigures &nlp_then = nlp2.teams[0], &vision_then = nlp2.teams[1];
  EXPECT_GT(nlp_today.wait_p95_s, 3600) << "today nlp waits for vision's jobs to end";
  EXPECT_EQ(nlp_then.wait_p95_s, 0) << "with a guarantee it takes GPUs back at once";
  EXPECT_EQ(vision_then.preempted, 2) << "vision's two newest slices went back";
  EXPECT_EQ(vision_today.preempted, 0);
  EXPECT_EQ(nlp_then.guaranteed, 2000);
  EXPECT_DOUBLE_EQ(nlp_then.guarantee_pct, 50.0);
  EXPECT_EQ(nlp_today.guaranteed, 0);
  // Each team's GPU-hours add up to the run's, and every team's share to the whole allocation.
  double held = 0, share = 0;
  for (const TeamReplayFigures& t : nlp2.teams) {
    held += t.gpu_hours_held;
    share += t.share_pct;
  }
  EXPECT_NEAR(held, nlp2.gpu_hours_held, 1e-9);
  EXPECT_NEAR(share, nlp2.mean_alloc_pct, 1e-6);
  EXPECT_NEAR(nlp_then.gpu_hours_held, 2.0, 1e-9) << "two 1-hour GPUs";
  EXPECT_THAT(out.str(), HasSubstr("compare: teams"));
  EXPECT_THAT(out.str(), HasSubstr("(no team)"));
  std::ifstream csv(dir / "out" / "replay_teams.csv");
  std::string header, row;
  std::getline(csv, header);
  EXPECT_EQ(header, "policy,team,guaranteed_gpus,guarantee_pct,started,waiting_at_end,preempted,wait_p50_s,"
                    "wait_p95_s,gpu_hours_held,share_pct");
  int rows = 0;
  while (std::getline(csv, row)) ++rows;
  EXPECT_EQ(rows, 6);
  // A compared config needs a config to compare with, and takes no policy.
  o.config.clear();
  EXPECT_THAT(std::string(RunReplayCommand(o, out, err).status().message()), HasSubstr("needs --config"));
  o.config = (dir / "today.toml").string();
  o.policies = {"best-fit"};
  EXPECT_THAT(std::string(RunReplayCommand(o, out, err).status().message()), HasSubstr("takes no --policy"));
  std::filesystem::remove_all(dir);
}

TEST(ReplayThroughScheduler, OnDemandReclaimKeepsIdleSlicesUntilAJobNeedsTheRoom) {
  // One GPU, four idle quarter slices for 4 h; at 2 h a half-GPU job arrives. "always" reclaims
  // all four at 40 min; "on-demand" keeps them and, at 2 h, takes the two longest idle (the
  // first two submitted) for the new job, which waits no longer than with "always".
  const std::string always = R"(
default_queue = "interactive"
[queues.interactive]
idle = { enabled = true, window = "30m", grace = "10m" }
)";
  std::string on_demand = always;
  on_demand.replace(on_demand.find(" }"), 2, ", reclaim = \"on-demand\" }");
  const Cluster one = Cluster::Uniform(1, 1, "H100-80GB", 128000, 1024 * kGiB);
  std::vector<ReplayJob> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Job("interactive", "u" + std::to_string(i), i * 60, 4 * 3600, 250, 0.0));
  jobs.push_back(Job("interactive", "late", 2 * 3600, 3600, 500, 0.9));
  ReplayResult a = Replay(one, jobs, Toml(always));
  ReplayResult d = Replay(one, jobs, Toml(on_demand));
  EXPECT_EQ(a.reclaimed, 4);
  EXPECT_EQ(a.reclaimed_on_demand, 0);
  EXPECT_EQ(d.reclaimed, 2);
  EXPECT_EQ(d.reclaimed_on_demand, 2);
  EXPECT_EQ(d.finished, 3) << "two idle sessions and the late job ran to their end";
  EXPECT_EQ(a.started, 5);
  EXPECT_EQ(d.started, 5);
  EXPECT_EQ(d.delays, a.delays) << "nobody waited longer";
  EXPECT_GT(d.gpu_hours_held, a.gpu_hours_held) << "the idle ones kept their share while nobody needed it";
  EXPECT_GT(d.warnings, a.warnings) << "also told they are reclaimable on demand";

  // The command's summary says how many went on demand.
  const auto dir = std::filesystem::temp_directory_path() / "gpuslice_replay_ondemand";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "jobs.csv") << "submit,duration,gpus,queue,user,utilisation\n"
                                     "0,4h,250m,interactive,a,0\n60,4h,250m,interactive,b,0\n"
                                     "120,4h,250m,interactive,c,0\n180,4h,250m,interactive,d,0\n"
                                     "2h,1h,500m,interactive,e,90\n";
  std::ofstream(dir / "d.toml") << on_demand;
  ReplayCommandOptions o;
  o.trace = (dir / "jobs.csv").string();
  o.cluster = "1x1:H100-80GB";
  o.config = (dir / "d.toml").string();
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].reclaimed, 2);
  EXPECT_THAT(out.str(), HasSubstr("2 of the 2 reclaimed were idle slices taken on demand"));
  std::filesystem::remove_all(dir);
}

TEST(ReplayThroughScheduler, WaitTimeIsCountedByTheReasonJobsWaited) {
  // alice may run one job at a time: her 2nd and 3rd jobs wait 10 s and 20 s for her cap. On one
  // GPU, a second whole-GPU job waits 10 s for room.
  const std::string toml = R"(
default_queue = "dev"
[queues.dev]
kinds = ["shared", "whole"]
default_kind = "shared"
user_max_jobs = 1
)";
  auto index = [](std::string_view name) {
    for (std::size_t k = 0; k < sched::kWaitReasonKinds; ++k)
      if (sched::WaitReasonKindName(k) == name) return k;
    ADD_FAILURE() << name;
    return std::size_t{0};
  };
  std::vector<ReplayJob> capped = {Job("dev", "alice", 0, 10, 250), Job("dev", "alice", 0, 10, 250),
                                   Job("dev", "alice", 0, 10, 250), Job("dev", "bob", 0, 10, 250)};
  ReplayResult r = Replay(kEightGpus, capped, Toml(toml));
  std::array<Micros, sched::kWaitReasonKinds> want{};
  want[index("user-cap")] = 30 * kSecond;
  EXPECT_EQ(r.wait_by_reason, want);

  const Cluster one = Cluster::Uniform(1, 1, "H100-80GB", 128000, 1024 * kGiB);
  std::vector<ReplayJob> full = {Job("default", "a", 0, 10, 1000), Job("default", "b", 5, 10, 1000)};
  auto config = ReplayConfig("best-fit", full);
  ASSERT_TRUE(config.ok());
  r = Replay(one, full, *config);
  want = {};
  want[index("no-device-fits")] = 5 * kSecond;  // b, from its arrival at 5 s to 10 s
  EXPECT_EQ(r.wait_by_reason, want);
  EXPECT_EQ(r.delays, (std::vector<Micros>{0, 5 * kSecond}));
}

}  // namespace
}  // namespace gpuslice::sim
