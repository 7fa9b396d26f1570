// Job records hold bytes (argv, environment, cwd, log path) that need not be UTF-8. JSON
// strings cannot, and nlohmann::json::dump threw on them, so a commit of such a job failed or
// terminated the writer. They travel as {"b64": ...} and come back exactly.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "store/codec.h"
#include "store/store.h"

namespace gpuslice::store {
namespace {

JobRecord OddJob() {
  JobRecord j;
  j.id = JobId(7);
  j.user = "bob";
  j.argv = {"sh", "-c", "x\xff\x01y", "caf\xc3\xa9"};
  j.cwd = "/tmp/\xfe\xff";
  j.env = {{"X", "\x80"}, {"N\xff", "ok"}, {"PATH", "/bin"}};
  j.log_path = "/var/\xff/7.log";
  j.reason = "could not start: '\xff'";
  return j;
}

TEST(BytesInJson, ValidUtf8IsAStringAnythingElseIsBase64) {
  EXPECT_EQ(BytesToJson("caf\xc3\xa9"), nlohmann::json("caf\xc3\xa9"));
  EXPECT_EQ(BytesToJson("\xff"), (nlohmann::json{{"b64", "/w=="}}));
  for (const nlohmann::json& bad : {nlohmann::json(5), nlohmann::json{{"b64", "!"}}, nlohmann::json{{"b64", 1}},
                                    nlohmann::json{{"b64", "/w=="}, {"x", 1}}, nlohmann::json::array()}) {
    auto r = BytesFromJson(bad, "field 'argv'");
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_NE(r.status().message().find("field 'argv'"), std::string::npos);
  }
}

TEST(BytesInJson, JobRecordRoundTripsThroughJsonText) {
  const JobRecord j = OddJob();
  const std::string text = JobToJson(j).dump();  // threw before
  auto back = JobFromJson(nlohmann::json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->argv, j.argv);
  EXPECT_EQ(back->cwd, j.cwd);
  EXPECT_EQ(back->env, j.env);
  EXPECT_EQ(back->log_path, j.log_path);
  EXPECT_EQ(back->reason, "could not start: '\\xff'");  // a message: escaped, not kept as bytes
}

TEST(BytesInJson, SqliteStoreKeepsTheBytesAcrossReopen) {
  auto dir = std::filesystem::temp_directory_path() / ("store_bytes_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    auto s = OpenSqliteStore(dir.string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = {OddJob()}}).ok());
  }
  auto s = OpenSqliteStore(dir.string());
  ASSERT_TRUE(s.ok());
  auto j = (*s)->GetJob(JobId(7));
  ASSERT_TRUE(j.ok() && j->has_value()) << j.status().ToString();
  EXPECT_EQ((*j)->argv, OddJob().argv);
  EXPECT_EQ((*j)->env, OddJob().env);
  EXPECT_EQ((*j)->cwd, OddJob().cwd);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::store
