// The submit request's one schema (api/submit_request.h): what the CLI sends reads back the same,
// and every malformed field is refused with an error naming it.
#include "api/submit_request.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::api {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(SubmitRequest, WhatIsSentReadsBackTheSame) {
  SubmitRequest r;
  r.argv = {"python", "train.py", std::string("caf\xe9", 4)};  // not UTF-8: sent as {"b64": ...}
  r.cwd = "/home/alice/work";
  r.env = {{"PATH", "/usr/bin"}, {"LANG", std::string("x\xff", 2)}};
  r.queue = "training";
  r.kind = "whole";
  r.gpus = 2;
  r.mem = "10GiB";
  r.time = "2h";
  r.model = "H100-80GB";
  r.team = "vision";
  r.umask = 022;
  r.idempotency_key = "k-1";
  auto back = SubmitRequest::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->argv, r.argv);
  EXPECT_EQ(back->cwd, r.cwd);
  EXPECT_EQ(back->env, (std::vector<std::pair<std::string, std::string>>{{"LANG", std::string("x\xff", 2)},
                                                                         {"PATH", "/usr/bin"}}))
      << "an object's names come back sorted";
  EXPECT_EQ(back->queue, r.queue);
  EXPECT_EQ(back->kind, r.kind);
  EXPECT_EQ(back->gpus, r.gpus);
  EXPECT_EQ(back->fraction, std::nullopt);
  EXPECT_EQ(back->mem, r.mem);
  EXPECT_EQ(back->time, r.time);
  EXPECT_EQ(back->model, r.model);
  EXPECT_EQ(back->team, r.team);
  EXPECT_EQ(back->umask, r.umask);
  EXPECT_EQ(back->idempotency_key, r.idempotency_key);
  EXPECT_EQ(r.ToJson()["umask"], "0022") << "as the shell prints it";

  // An environment name that is not UTF-8 cannot be a JSON key: the list form, in order.
  r.env = {{std::string("N\xff", 2), "1"}, {"A", "2"}};
  ASSERT_TRUE(r.ToJson()["env"].is_array());
  back = SubmitRequest::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->env, r.env);
}

TEST(SubmitRequest, TheApisAliasesAndNumbersAsTextAreRead) {
  auto r = SubmitRequest::FromJson(json{{"argv", {"true"}}, {"gpu", 0.5}, {"memory", "1GiB"}, {"time_limit", 60}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fraction, "0.5");
  EXPECT_EQ(r->mem, "1GiB");
  EXPECT_EQ(r->time, "60");
}

TEST(SubmitRequest, EveryMalformedFieldIsNamed) {
  const json ok_argv = json::array({"true"});
  struct Case {
    json body;
    std::string error;
  };
  const std::string long_text(300, 'q');
  const Case cases[] = {
      {json::array(), "body: expected a JSON object"},
      {{{"argv", ok_argv}, {"colour", "red"}}, "field 'colour': unknown"},
      {{{"argv", ok_argv}, {"idempotency_key", "a b"}}, "field 'idempotency_key': value '\"a b\"' must be 1 to 128"},
      {{{"argv", ok_argv}, {"umask", "0999"}}, "field 'umask': value '\"0999\"'"},
      {{{"argv", ok_argv}, {"umask", 18}}, "field 'umask'"},
      {{{"argv", ok_argv}, {"queue", long_text}}, "field 'queue': 300 bytes, at most 256"},
      {{{"argv", ok_argv}, {"kind", json::array()}}, "field 'kind': an array of 0 elements is not a text value"},
      {{{"argv", ok_argv}, {"gpus", 0}}, "field 'gpus': value '0' must be an integer 1..1024"},
      {{{"argv", ok_argv}, {"gpus", "2"}}, "field 'gpus'"},
      {{{"argv", ok_argv}, {"team", json::object()}}, "field 'team'"},
      {{{"argv", json::array()}}, "field 'argv': a non-empty list"},
      {{{"argv", {""}}}, "field 'argv': the program name is empty"},
      {{{"argv", {std::string("a\0b", 3)}}}, "field 'argv': element 0"},
      {{{"argv", {1}}}, "field 'argv': element 0"},
      {{{"argv", ok_argv}, {"cwd", "relative"}}, "field 'cwd': value 'relative' must be an absolute path"},
      {{{"argv", ok_argv}, {"env", "PATH=/bin"}}, "field 'env': expected an object"},
      {{{"argv", ok_argv}, {"env", {{"A=B", "c"}}}}, "field 'env': entry 'A=B'"},
      {{{"argv", ok_argv}, {"env", json::array({json::array({"A"})})}}, "field 'env': element 0 is not [name, value]"},
      {{{"argv", ok_argv}, {"env", {{"BIG", std::string(200 * 1024, 'x')}}}}, "field 'env': entry 'BIG' is 204804 bytes"},
  };
  for (const Case& c : cases) {
    auto r = SubmitRequest::FromJson(c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump().substr(0, 200);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.error)) << c.body.dump().substr(0, 200);
  }
  // argv and env together past what execve takes.
  json big = json::array();
  for (int i = 0; i < 9; ++i) big.push_back(std::string(120 * 1024, 'a'));
  auto r = SubmitRequest::FromJson(json{{"argv", big}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("fields 'argv' and 'env'"));
}

}  // namespace
}  // namespace gpuslice::api
