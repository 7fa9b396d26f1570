// `gpuslice report` against a real daemon (`serve --simulate`, its Unix socket): the CLI asks
// GET /v1/report and prints the same document with --json; the table, CSV and SVG files come
// out; bad flags and query values are refused with errors naming them; a period before any
// history is "not found" (exit 3).
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

constexpr const char* kConfig = R"toml(
[queues.interactive]
[queues.training]
[queues.inference]
)toml";

TEST(ReportE2E, CliAndApiOnALiveDaemon) {
  DaemonHarness h("report", kConfig);
  h.Start();
  auto id = h.Submit({"sh", "-c", "sleep 2"}, {{"queue", "training"}, {"gpus", 1}});
  h.WaitJob(id, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });

  std::string out;
  ASSERT_EQ(h.Cli({"report", "--socket", h.socket(), "--since", "1h", "--by", "job", "--json"}, &out), 0) << out;
  const json doc = json::parse(out);
  for (const char* k : {"period", "by", "devices", "totals", "groups", "wait", "wait_by_reason", "top_idle",
                        "timeline", "verdict", "simulated"}) {
    EXPECT_TRUE(doc.contains(k)) << k;
  }
  EXPECT_EQ(doc["by"], "job");
  EXPECT_EQ(doc["devices"], 8);
  EXPECT_TRUE(doc["simulated"].get<bool>());
  ASSERT_EQ(doc["groups"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["groups"][0]["key"], std::to_string(id));
  EXPECT_GT(doc["groups"][0]["held_gpu_hours"].get<double>(), 0.0);
  EXPECT_EQ(doc["totals"]["jobs"], 1);

  // The API gives the same document (anyone may read it).
  auto api = h.Client().Get("/v1/report?since=1h&by=job");
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  EXPECT_EQ((*api)["groups"], doc["groups"]);
  auto bad = h.Client().Get("/v1/report?by=team");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'team'"), std::string::npos) << bad.status().message();

  ASSERT_EQ(h.Cli({"report", "--socket", h.socket(), "--since", "1h"}, &out), 0) << out;
  EXPECT_NE(out.find("8 GPUs:"), std::string::npos) << out;
  EXPECT_NE(out.find("training"), std::string::npos) << out;
  ASSERT_EQ(h.Cli({"report", "--socket", h.socket(), "--since", "1h", "--csv"}, &out), 0) << out;
  EXPECT_EQ(out.rfind("queue,held_gpu_hours,", 0), 0u) << out;
  const std::string svg_dir = h.dir() + "/plots";
  ASSERT_EQ(h.Cli({"report", "--socket", h.socket(), "--since", "1h", "--out", svg_dir}, &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(svg_dir + "/held_vs_used.svg"));
  EXPECT_TRUE(std::filesystem::exists(svg_dir + "/by_queue.svg"));

  EXPECT_EQ(h.Cli({"report", "--socket", h.socket(), "--since", "7x"}, &out), 2);
  EXPECT_NE(out.find("'7x'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"report", "--socket", h.socket(), "--from", "2026-02-30"}, &out), 2);
  EXPECT_NE(out.find("--from '2026-02-30'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"report", "--socket", h.socket(), "--to", "tomorrow"}, &out), 2);
  EXPECT_NE(out.find("--to 'tomorrow'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"report", "--socket", h.socket(), "--by", "team"}, &out), 2);
  EXPECT_NE(out.find("--by 'team'"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"report", "--socket", h.socket(), "--from", "2020-01-01", "--to", "2020-01-02"}, &out), 3);
  EXPECT_NE(out.find("no stored history"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
