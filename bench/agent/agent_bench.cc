// Agent overhead: CPU time and resident memory while sampling 8 fake H100s carrying 100 real
// processes (10 slices x 10 processes, attributed through /proc) at 1 Hz, rendering /metrics
// every round. Baseline in the same run: the same agent with no processes and no slices.
// Targets (issue 4): < 1% of one core, < 30 MB RSS.
// Usage: agent_bench [seconds=20] [baseline_seconds=5]

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/metrics.h"
#include "devices/fake.h"

namespace gs = gpuslice;

namespace {

double CpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

long RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

struct Tree {
  pid_t root = -1;
  std::vector<pid_t> children;
};

// A root process with `n` sleeping children; the children's pids come back through a pipe.
Tree SpawnTree(int n) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  Tree t;
  t.root = ::fork();
  if (t.root == 0) {
    for (int i = 0; i < n; ++i) {
      pid_t c = ::fork();
      if (c == 0) {
        ::execl("/bin/sleep", "sleep", "120", nullptr);
        ::_exit(127);
      }
      (void)!::write(fds[1], &c, sizeof(c));
    }
    ::execl("/bin/sleep", "sleep", "120", nullptr);
    ::_exit(127);
  }
  ::close(fds[1]);
  for (int i = 0; i < n; ++i) {
    pid_t c = 0;
    if (::read(fds[0], &c, sizeof(c)) == sizeof(c)) t.children.push_back(c);
  }
  ::close(fds[0]);
  return t;
}

struct Phase {
  double cpu_s = 0;
  double wall_s = 0;
  int rounds = 0;
};

Phase Run(gs::agent::Agent& agent, int seconds) {
  std::atomic<bool> done{false};
  std::string metrics;
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  const int rounds0 = agent.rounds();
  if (!agent.Start().ok()) std::abort();
  // /metrics rendering once a second, as a scraper would trigger it.
  for (int i = 0; i < seconds; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    metrics = gs::agent::RenderPrometheus(agent.MetricsSnapshot());
  }
  agent.Stop();
  Phase p;
  p.cpu_s = CpuSeconds() - cpu0;
  p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.rounds = agent.rounds() - rounds0;
  if (metrics.empty()) std::abort();
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 20;
  const int baseline_seconds = argc > 2 ? std::atoi(argv[2]) : 5;
  const long rss_start = RssKiB();

  gs::devices::FakeBackend fake(*gs::devices::ParseSimulateSpec("8xH100-80GB"), gs::devices::SystemClock());
  gs::agent::Agent agent(fake, gs::agent::AgentOptions{});

  // Baseline: 8 devices, nothing running, nothing bound.
  const Phase base = Run(agent, baseline_seconds);

  // Load: 10 slices x 10 processes, spread over the 8 devices.
  std::vector<Tree> trees;
  for (int s = 0; s < 10; ++s) trees.push_back(SpawnTree(10));
  std::vector<gs::devices::FakeStep> steps(8);
  for (int s = 0; s < 10; ++s) {
    const std::uint32_t dev = static_cast<std::uint32_t>(s % 8);
    gs::agent::SliceBinding b;
    b.slice = gs::SliceId(s + 1);
    b.job = gs::JobId(1000 + s);
    b.user = "user" + std::to_string(s);
    b.queue = "interactive";
    b.kind = gs::sched::SliceKind::kShared;
    b.devices = {gs::DeviceIndex(dev)};
    b.root_pids = {trees[s].root};
    b.idle.enabled = true;
    agent.Bind(b);
    for (pid_t c : trees[s].children) {
      steps[dev].processes.push_back({c, 512 * gs::kMiB, 37, 12, "", false});
    }
    steps[dev].gpu_util = 450;
  }
  for (std::uint32_t d = 0; d < 8; ++d) fake.SetState(gs::DeviceIndex(d), steps[d]);
  const Phase load = Run(agent, seconds);
  const long rss_end = RssKiB();

  for (auto& t : trees) {
    for (pid_t c : t.children) ::kill(c, SIGKILL);
    ::kill(t.root, SIGKILL);
    ::waitpid(t.root, nullptr, 0);
  }

  const double base_pct = 100.0 * base.cpu_s / base.wall_s;
  const double load_pct = 100.0 * load.cpu_s / load.wall_s;
  std::printf("agent_bench: 8 fake H100-80GB, 100 processes in 10 slices, 1 Hz, /metrics every 1 s\n");
  std::printf("  baseline (no processes): %d rounds in %.1f s, CPU %.1f ms = %.3f%% of one core\n", base.rounds,
              base.wall_s, base.cpu_s * 1e3, base_pct);
  std::printf("  loaded:                  %d rounds in %.1f s, CPU %.1f ms = %.3f%% of one core (target < 1%%)\n",
              load.rounds, load.wall_s, load.cpu_s * 1e3, load_pct);
  std::printf("  CPU per round: %.2f ms loaded vs %.2f ms baseline (ratio %.1fx)\n",
              1e3 * load.cpu_s / std::max(1, load.rounds), 1e3 * base.cpu_s / std::max(1, base.rounds),
              base.cpu_s > 0 ? (load.cpu_s / std::max(1, load.rounds)) / (base.cpu_s / std::max(1, base.rounds)) : 0.0);
  std::printf("  RSS: %.1f MB at end (%.1f MB at start; target < 30 MB)\n", rss_end / 1024.0, rss_start / 1024.0);
  return (load_pct < 1.0 && rss_end < 30 * 1024) ? 0 : 1;
}
