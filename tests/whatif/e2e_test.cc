// `gpuslice whatif` against a real daemon (`serve --simulate`, its Unix socket, its SQLite
// store): the CLI asks GET /v1/whatif, and reading the stopped daemon's state directory with
// --state-dir gives the same figures; table, CSV and SVG come out; bad flags and bad input
// rows are refused naming the flag or the field and the value (exit 2).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

TEST(WhatifE2E, ApiAndStateDirAgreeOnALiveDaemonsHistory) {
  DaemonHarness h("whatif", QueuesConfig({.idle_window = "2s", .idle_grace = "1s"}));
  h.SetSimulate("2xH100-80GB");
  h.Start();
  const auto train = h.Submit({"sh", "-c", "sleep 2"}, {{"queue", "training"}, {"gpus", 1}});
  const auto notebook = h.Submit({"sleep", "30"}, {{"queue", "interactive"}});  // idle: reclaimed after ~3 s
  h.WaitJob(train, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });
  const json nb = h.WaitJob(notebook, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });
  EXPECT_EQ(nb["job"]["state"], "reclaimed");

  std::string out;
  ASSERT_EQ(h.Cli({"whatif", "--socket", h.socket(), "--since", "1h", "--json"}, &out), 0) << out;
  const json api = json::parse(out);
  for (const char* k : {"source", "period", "gpus", "jobs", "scenarios", "verdict", "headlines", "notes"}) {
    EXPECT_TRUE(api.contains(k)) << k;
  }
  EXPECT_EQ(api["gpus"], 2);
  EXPECT_EQ(api["jobs"], 2);
  ASSERT_GE(api["scenarios"].size(), 8u);
  EXPECT_EQ(api["scenarios"][0]["name"], "as-recorded");
  EXPECT_GT(api["scenarios"][0]["held_gpu_hours"].get<double>(), 0.0);

  // The table and the verdict, through the daemon.
  ASSERT_EQ(h.Cli({"whatif", "--socket", h.socket(), "--since", "1h"}, &out), 0) << out;
  EXPECT_NE(out.find("SCENARIO"), std::string::npos) << out;
  EXPECT_NE(out.find("as-recorded"), std::string::npos) << out;

  h.Terminate();
  // The same history from the stopped daemon's store, offline.
  const std::string config = h.dir() + "/gpuslice.toml";
  ASSERT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/state", "--config", config, "--cluster", "1x2:H100-80GB", "--since", "1h",
                   "--json"}, &out), 0) << out;
  const json offline = json::parse(out);
  ASSERT_EQ(offline["scenarios"].size(), api["scenarios"].size());
  for (std::size_t i = 0; i < api["scenarios"].size(); ++i) {
    const json& a = api["scenarios"][i];
    const json& o = offline["scenarios"][i];
    EXPECT_EQ(a["name"], o["name"]);
    for (const char* k : {"held_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "given_back_gpu_hours"}) {
      EXPECT_EQ(a[k], o[k]) << a["name"] << " " << k;
    }
    EXPECT_EQ(a["cut"], o["cut"]) << a["name"];
    EXPECT_EQ(a["waits"], o["waits"]) << a["name"];
  }
  const std::string plots = h.dir() + "/plots";
  ASSERT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/state", "--config", config, "--since", "1h", "--csv", "--out", plots}, &out), 0)
      << out;
  EXPECT_NE(out.find("scenario,description,gpus,held_gpu_hours"), std::string::npos) << out;
  for (const char* f : {"whatif_gpu_hours.svg", "whatif_waits.svg", "whatif_verdict.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(plots + "/" + f)) << f;
  }

  // Bad input: the flag or the field and the value, exit 2, nothing run.
  EXPECT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/state", "--since", "7x"}, &out), 2);
  EXPECT_NE(out.find("'7x'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"whatif", "--socket", h.socket(), "--scenarios", "w.toml"}, &out), 2);
  EXPECT_NE(out.find("--scenarios: only with --state-dir, --sacct or --trace"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/state", "--threads", "0"}, &out), 2);
  EXPECT_NE(out.find("--threads 0"), std::string::npos) << out;
  const std::string trace = h.dir() + "/bad.csv";
  std::ofstream(trace) << "submit,duration,gpus,activity\n0,1h,1,a2h\n";
  EXPECT_EQ(h.Cli({"whatif", "--trace", trace, "--cluster", "1x2"}, &out), 2);
  EXPECT_NE(out.find("bad.csv:2: column 'activity': value 'a2h'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"whatif", "--trace", trace}, &out), 2);
  EXPECT_NE(out.find("--cluster: needed with --trace"), std::string::npos) << out;
  const std::string spec = h.dir() + "/w.toml";
  std::ofstream(spec) << "[[scenario]]\nname = \"x\"\nreclaim = { window = \"soon\" }\n";
  EXPECT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/state", "--scenarios", spec}, &out), 2);
  EXPECT_NE(out.find("scenario.x.reclaim.window = 'soon'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"whatif", "--state-dir", h.dir() + "/nope"}, &out), 3);
  EXPECT_NE(out.find("no gpuslice.db there"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
