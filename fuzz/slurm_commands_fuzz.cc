// Fuzzes how gpuslice reads the output of the Slurm commands it runs: squeue rows
// (ListSlurmJobs, `gpuslice slurm ps` and the agent), sinfo GRES lines (PlanSlurmSubmission,
// `gpuslice slurm submit`), sbatch's job id (SubmitToSlurm) and `scontrol show job` (ShowJob).
// These parsers sit inside the functions that run the commands, so the commands are real
// processes: tiny scripts in a scratch bin directory (SlurmContext::bin_dir, as a test cluster
// uses) that print this input's parts. Then one round of the node agent (`gpuslice agent
// --slurm`) over those squeue rows, fake GPUs running the processes of a simulate script, and a
// scratch /proc whose process 4242 has the input's environment and cgroup: a job's own
// processes are what a hostile tenant controls. Input: squeue, sinfo, sbatch and scontrol
// outputs, the simulate script, pid 4242's environ (newlines stand for its NULs) and cgroup,
// separated by lines "%%". Slow (a few processes per input) but exactly production's path.
// Production catches nothing around these calls, nor does this target.
#include <sys/stat.h>

#include <algorithm>

#include "devices/fake.h"
#include "devices/scripted.h"
#include "fuzz/fuzz_util.h"
#include "slurm/agent.h"
#include "slurm/client.h"

namespace gpuslice::fuzz {
namespace {

const std::string& BinDir() {
  static const std::string dir = [] {
    std::string d = ScratchDir() + "/bin";
    mkdir(d.c_str(), 0700);
    for (const char* cmd : {"squeue", "sinfo", "sbatch", "scontrol", "scancel"}) {
      std::string path = WriteScratch(std::string("bin/") + cmd, "#!/bin/sh\nexec cat \"$0.out\"\n");
      chmod(path.c_str(), 0700);
    }
    mkdir((ScratchDir() + "/proc").c_str(), 0700);
    mkdir((ScratchDir() + "/proc/4242").c_str(), 0700);
    return d;
  }();
  return dir;
}

void AgentRound(const slurm::SlurmContext& ctx, std::string_view script, std::string_view environ,
                std::string_view cgroup) {
  std::string env(environ);
  std::replace(env.begin(), env.end(), '\n', '\0');
  WriteScratch("proc/4242/environ", env);
  WriteScratch("proc/4242/cgroup", cgroup);
  slurm::SlurmAgentOptions o;
  o.policy = sched::DefaultConfig();
  o.slurm = ctx;
  o.hostname = "node1";
  o.proc_root = ScratchDir() + "/proc";
  o.log = [](const std::string&) {};
  auto fake = devices::FakeBackend::Create("2xH100-80GB", [] { return Micros{1'800'000'000} * kSecond; });
  if (!fake.ok()) Fail(fake.status().ToString());
  // The scripted activity, as `agent --slurm --simulate-script` has it: a wrapper at the interface.
  devices::ScriptedBackend backend(std::move(fake).value(), WriteScratch("simulate.json", script), o.proc_root);
  (void)backend.Load();  // a malformed script is an error the agent logs; the round goes on
  slurm::SlurmAgent agent(backend, o);
  for (Micros t : {Micros{0}, kHour, 30 * 24 * kHour}) agent.RunRound(Micros{1'800'000'000} * kSecond + t);
  Check(!agent.MetricsText().empty(), "no metrics text");
}

}  // namespace
}  // namespace gpuslice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string& bin = fuzz::BinDir();
  auto parts = fuzz::SplitInput(fuzz::AsText(data, size), "\n%%\n");
  parts.resize(7);
  int i = 0;
  for (const char* cmd : {"squeue", "sinfo", "sbatch", "scontrol"}) {
    fuzz::WriteScratch(std::string("bin/") + cmd + ".out", parts[i++]);
  }
  slurm::SlurmContext ctx;
  ctx.bin_dir = bin;
  ctx.timeout = 10 * kSecond;

  slurm::ListOptions lo;
  lo.slurm = ctx;
  auto rows = slurm::ListSlurmJobs(lo);
  if (rows.ok()) {
    for (const auto& r : *rows) fuzz::Check(r.job_id.find('|') == std::string::npos, "'|' in a job id");
  } else {
    fuzz::TouchError(rows.status());
  }

  slurm::SlurmSubmitRequest shard;  // interactive: a share of a GPU (shards)
  shard.queue = "interactive";
  shard.fraction = 250;
  shard.command = {"python", "train.py"};
  shard.workdir = "/tmp";
  shard.slurm = ctx;
  auto plan = slurm::PlanSlurmSubmission(shard);
  if (!plan.ok()) fuzz::TouchError(plan.status());

  slurm::SlurmSubmitRequest mig = shard;  // inference: a MIG instance sized by memory
  mig.queue = "inference";
  mig.fraction.reset();
  mig.memory = 10 * kGiB;
  plan = slurm::PlanSlurmSubmission(mig);
  if (!plan.ok()) fuzz::TouchError(plan.status());

  slurm::SlurmSubmitRequest whole = shard;  // training: whole GPUs, then sbatch's answer
  whole.queue = "training";
  whole.fraction.reset();
  whole.gpus = 2;
  auto id = slurm::SubmitToSlurm(whole);
  if (id.ok()) {
    fuzz::Check(!id->empty() && id->find_first_not_of("0123456789") == std::string::npos,
                "a job id that is not a number");
  } else {
    fuzz::TouchError(id.status());
  }

  auto job = slurm::ShowJob("123", ctx);
  if (!job.ok()) fuzz::TouchError(job.status());

  fuzz::AgentRound(ctx, parts[4], parts[5], parts[6]);
  return 0;
}
