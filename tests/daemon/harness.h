#pragma once
// Test harness: runs `gpuslice serve` on simulated devices in a temporary state directory,
// talks to it through its Unix socket, and kills / restarts it. Not thread-safe except
// Client(), which returns a fresh connection per call.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/client.h"

namespace gpuslice::testing_e2e {

using nlohmann::json;

class DaemonHarness {
 public:
  // Placeholder in `extra` replaced by <dir>/script.json.
  static constexpr const char* kScript = "@SCRIPT@";
  // `config_toml` is written to <dir>/gpuslice.toml. `extra` are more serve flags.
  explicit DaemonHarness(const std::string& name, const std::string& config_toml,
                         std::vector<std::string> extra = {});
  ~DaemonHarness();

  void Start();      // starts and waits until the API answers
  // The --simulate spec of the next Start() (default 8xH100-80GB): a restart with other devices.
  void SetSimulate(std::string spec) { simulate_ = std::move(spec); }
  void Kill9();      // SIGKILL, reaped
  void Terminate();  // SIGTERM, reaped

  api::ApiClient Client() const { return api::ApiClient(socket_); }
  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  std::string ServeLog() const;
  void WriteScript(const json& script) const;  // --simulate-script contents

  // Runs the gpuslice CLI (optionally as another uid); returns exit code, fills *out.
  int Cli(const std::vector<std::string>& args, std::string* out, int as_uid = -1) const;

  // Submits {"argv": argv, ...extra}; asserts success; returns the job id.
  std::uint64_t Submit(const std::vector<std::string>& argv, json extra = json::object());
  json Job(std::uint64_t id);
  // Polls (every 50 ms, up to `timeout`) until pred(job) holds; returns the last job seen.
  json WaitJob(std::uint64_t id, const std::function<bool(const json&)>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(15));
  std::string Log(std::uint64_t id);
  // Polls the job's log until it contains `text`.
  bool WaitLog(std::uint64_t id, const std::string& text,
               std::chrono::milliseconds timeout = std::chrono::seconds(15));

 private:
  std::string dir_;
  std::string socket_;
  std::vector<std::string> extra_;
  std::string simulate_ = "8xH100-80GB";
  pid_t pid_ = -1;
};

bool IsTerminal(const std::string& state);
std::string Binary();
// A TCP port on 127.0.0.1 that the kernel found free a moment ago (for serve --tcp and the like).
int FreePort();

// The queues most tests run on: interactive (a 1h time limit; idle reclaim after `idle_window`
// idle and `idle_grace` warned), training and inference. `interactive` and `idle` are more TOML
// lines for the [queues.interactive] and [queues.interactive.idle] tables.
struct QueuesToml {
  std::string idle_window = "5m";
  std::string idle_grace = "1m";
  std::string interactive{};
  std::string idle{};
};
// As gpuslice.toml, e.g. QueuesConfig({.idle_window = "2s", .idle_grace = "1s"}).
std::string QueuesConfig(const QueuesToml& q = {});

// Predicates on a job view, for WaitJob.
bool Running(const json& job);  // its state is "running"
bool Ended(const json& job);    // its state is terminal

}  // namespace gpuslice::testing_e2e
