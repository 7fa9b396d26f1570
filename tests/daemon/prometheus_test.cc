// The monitoring stack people already run, for real: Debian's Prometheus scrapes `gpuslice
// serve` over TCP with its bearer token (authorization.credentials_file) and a Slurm node agent
// (`gpuslice agent --slurm`, here without a reachable Slurm: it still serves its devices), at
// a 1 s interval. Then Prometheus' HTTP API returns the busy slice's scripted utilisation, every
// query of examples/grafana/gpuslice.json returns data, and both /metrics texts pass
// `promtool check metrics` (but for dcgm-exporter's own names and labels, kept on purpose). Skipped (with the reason) where the prometheus package is absent:
// scripts/install-deps installs it.
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/daemon/harness.h"
#include "testing/files.h"

namespace gpuslice::testing_e2e {
namespace {

using gpuslice::testing::Slurp;

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A child process with its output in `log`; killed on destruction.
class Child {
 public:
  Child(std::vector<std::string> args, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log.c_str(), "a");
      if (f != nullptr) {
        ::dup2(fileno(f), 1);
        ::dup2(fileno(f), 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

// Runs `promtool check metrics` on `text`; returns its exit status and output.
int PromtoolCheck(const std::string& text, const std::string& dir, std::string* out) {
  const std::string in = dir + "/metrics.txt", log = dir + "/promtool.out";
  std::ofstream(in) << text;
  const int rc = std::system(("promtool check metrics < " + in + " > " + log + " 2>&1").c_str());
  *out = Slurp(log);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

nlohmann::json Query(httplib::Client& prom, const std::string& expr) {
  auto r = prom.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
  if (!r || r->status != 200) return nlohmann::json();
  return nlohmann::json::parse(r->body, nullptr, false);
}

// Polls `expr` until it returns a non-empty vector (or `limit` passes); the result, or empty.
nlohmann::json WaitForData(httplib::Client& prom, const std::string& expr, seconds limit = seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = Query(prom, expr);
    if (r.is_object() && r.value("status", "") == "success" && !r["data"]["result"].empty()) return r["data"]["result"];
    std::this_thread::sleep_for(milliseconds(250));
  }
  return nlohmann::json::array();
}

constexpr const char* kToken = "s3cret-scrape-token-0123456789";

TEST(Prometheus, ScrapesServeAndTheSlurmAgentAndTheDashboardQueriesReturnData) {
  if (!fs::exists("/usr/bin/prometheus") || std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Debian's prometheus package is not installed (scripts/install-deps installs it)";
  }
  const int serve_port = FreePort(), agent_port = FreePort(), prom_port = FreePort();
  // With a team, so that the gpuslice_team_* families are checked by promtool too.
  const std::string teams = fmt::format("\n[teams.lab]\nmembers = [\"{}\"]\nguarantee = {{ training = 1 }}\n",
                                        getpwuid(getuid())->pw_name);
  DaemonHarness h("prom", QueuesConfig({.idle_window = "10m"}) + teams,
                  {"--simulate-script", DaemonHarness::kScript, "--tcp", "127.0.0.1:" + std::to_string(serve_port), "--token-file",
                   (fs::temp_directory_path() / ("gse2e_prom_" + std::to_string(getpid())) / "tokens").string()});
  const std::string dir = h.dir();
  {
    // The daemon's token file names the identity (docs/api.md "Identity"): Prometheus scrapes
    // with a read-only token. Prometheus' credentials_file holds the bare token.
    std::ofstream(dir + "/tokens") << "prometheus read-only " << kToken << "\n";
    ::chmod((dir + "/tokens").c_str(), 0600);
    std::ofstream(dir + "/token") << kToken << "\n";
    ::chmod((dir + "/token").c_str(), 0600);
  }
  h.WriteScript({{"jobs", {{"1", {{"sm", 80}, {"memory", "2GiB"}}}}}});
  h.Start();
  ASSERT_EQ(h.Submit({"sleep", "120"}, {{"queue", "interactive"}}), 1u);
  h.WaitJob(1, [](const json& j) { return j["state"] == "running"; });
  // One that cannot start (all 8 whole devices while one is shared) waits, with a reason.
  ASSERT_EQ(h.Submit({"sleep", "120"}, {{"queue", "training"}, {"kind", "whole"}, {"gpus", 8}}), 2u);

  // The Slurm node agent on its own fake GPUs, one scripted busy device.
  std::ofstream(dir + "/agent.json") << R"({"processes": [{"pid": 4242, "device": 0, "sm": 55, "memory": "3GiB"}]})";
  Child agent({Binary(), "agent", "--slurm", "--backend", "fake", "--simulate", "2xH100-80GB", "--simulate-script",
               dir + "/agent.json", "--listen", "127.0.0.1:" + std::to_string(agent_port), "--interval", "1s",
               "--hostname", "slurm-node", "--slurm-timeout", "1s"},
              dir + "/agent.log");

  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n"
      << "  - job_name: gpuslice\n    authorization:\n      type: Bearer\n      credentials_file: " << dir
      << "/token\n    static_configs:\n      - targets: ['127.0.0.1:" << serve_port << "']\n"
      << "  - job_name: slurm-agent\n    static_configs:\n      - targets: ['127.0.0.1:" << agent_port << "']\n";
  Child prometheus({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                    "--storage.tsdb.path=" + dir + "/tsdb", "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
                    "--log.level=warn"},
                   dir + "/prometheus.log");
  httplib::Client prom("127.0.0.1", prom_port);
  prom.set_connection_timeout(1);

  // The busy slice's utilisation, as the script says (80 %), through Prometheus.
  double util = -1;
  const auto deadline = std::chrono::steady_clock::now() + seconds(40);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = Query(prom, R"(gpuslice_slice_sm_utilization_ratio{job_id="1"})");
    if (r.is_object() && r.value("status", "") == "success" && !r["data"]["result"].empty()) {
      util = std::stod(r["data"]["result"][0]["value"][1].get<std::string>());
      if (util > 0) break;
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
  EXPECT_DOUBLE_EQ(util, 0.8) << Slurp(dir + "/prometheus.log") << Slurp(dir + "/agent.log");
  // Both targets are up (the bearer token was accepted), and the agent's scripted device is
  // there under dcgm-exporter's name and labels.
  for (const char* job : {"gpuslice", "slurm-agent"}) {
    const auto up = WaitForData(prom, std::string("up{job=\"") + job + "\"} == 1");
    EXPECT_FALSE(up.empty()) << job << " not scraped: " << Slurp(dir + "/agent.log");
  }
  const auto dev = WaitForData(prom, R"(DCGM_FI_DEV_GPU_UTIL{Hostname="slurm-node",gpu="0"})");
  ASSERT_FALSE(dev.empty()) << "no DCGM_FI_DEV_GPU_UTIL from the Slurm agent";
  EXPECT_EQ(dev[0]["value"][1], "55");

  // Every query the shipped dashboard makes returns data.
  const auto board = nlohmann::json::parse(Slurp(std::string(GPUSLICE_SOURCE_DIR) + "/examples/grafana/gpuslice.json"));
  int queries = 0;
  for (const auto& panel : board["panels"]) {
    for (const auto& t : panel["targets"]) {
      const std::string expr = t["expr"].get<std::string>();
      ++queries;
      // rate/increase want two scrapes: WaitForData polls.
      EXPECT_FALSE(WaitForData(prom, expr, seconds(10)).empty())
          << panel["title"] << ": '" << expr << "' returned no data";
    }
  }
  EXPECT_GE(queries, 8);
  // The web dashboard's views on the exported metrics: what a slice holds, and why jobs wait.
  const auto held = WaitForData(prom, R"(gpuslice_slice_held_gpus{job_id="1"})");
  ASSERT_FALSE(held.empty()) << "no gpuslice_slice_held_gpus for the running job";
  EXPECT_GT(std::stod(held[0]["value"][1].get<std::string>()), 0.0);
  const json waiting = h.Job(2)["job"];
  ASSERT_EQ(waiting["state"], "pending");
  ASSERT_TRUE(waiting["pending_reason"].is_object()) << waiting.dump();
  const auto reason = WaitForData(prom, R"(gpuslice_queue_pending_jobs_by_reason{queue="training"})");
  ASSERT_EQ(reason.size(), 1u) << reason.dump();
  EXPECT_EQ(reason[0]["metric"]["reason"], waiting["pending_reason"]["kind"]);
  EXPECT_EQ(reason[0]["value"][1], "1");

  // Both exporters' text passes promtool's checks (names, types, base units).
  httplib::Client serve("127.0.0.1", serve_port);
  auto sm = serve.Get("/metrics", httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(sm && sm->status == 200);
  httplib::Client ag("127.0.0.1", agent_port);
  auto am = ag.Get("/metrics");
  ASSERT_TRUE(am && am->status == 200);
  // The only lint findings allowed are on the DCGM_FI_* families, whose names, labels and types
  // are dcgm-exporter's, kept so that dashboards written for it work unchanged (its own output
  // draws the same findings: camelCase labels such as modelName, the energy counter without
  // _total). Exit 3 is "lint problems"; a text that does not parse exits 1. Every gpuslice_*
  // family is clean (names, types, base units).
  EXPECT_NE(sm->body.find("gpuslice_team_held_gpus{team=\"lab\",queue=\"interactive\"}"), std::string::npos)
      << "the team families are in what promtool checks";
  for (const std::string* text : {&sm->body, &am->body}) {
    std::string out;
    const int rc = PromtoolCheck(*text, dir, &out);
    EXPECT_TRUE(rc == 0 || rc == 3) << "promtool could not parse the text:\n" << out << "\n---\n" << *text;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      EXPECT_EQ(line.rfind("DCGM_FI_", 0), 0u) << "promtool: " << line;
    }
  }
}

}  // namespace
}  // namespace gpuslice::testing_e2e
