// Hostile and careless input through the real `gpuslice` binary: bytes that are not UTF-8 in
// the environment, the arguments and the working directory travel to the job exactly; text a
// job submitted cannot inject terminal control or forge rows in `ps`/`show`; argv/env sizes
// are capped at submit; every numeric flag is bounded with an error naming it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;          // exit status; 128+N for signal N; -2 when it ran past the timeout
  std::string out;      // stdout + stderr
};

// Runs the gpuslice binary with exactly `env` and in `cwd`, killing it after `timeout` (a CLI
// that busy-loops or hangs fails the test instead of stalling it).
CliRun RunGpuslice(const std::vector<std::string>& args, const std::vector<std::string>& env,
                const std::string& cwd, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::string outfile = fs::temp_directory_path() / ("gs_cli_" + std::to_string(getpid()) + "_" +
                                                           std::to_string(rand()) + ".out");
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(outfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    if (chdir(cwd.c_str()) != 0) _exit(98);
    std::vector<std::string> full = {Binary()};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> e = env;
    for (auto& v : e) envp.push_back(v.data());
    envp.push_back(nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  CliRun r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.rc = -2;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(outfile);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  fs::remove(outfile);
  return r;
}

std::vector<std::string> BaseEnv(const DaemonHarness& h) {
  return {"PATH=/usr/bin:/bin", "GPUSLICE_SOCKET=" + h.socket()};
}

// No byte a terminal would act on: C0 controls (but the newline ending a line), DEL, C1 in
// UTF-8 (0xC2 0x80-0x9F), and nothing that is not UTF-8 at all.
std::string FirstTerminalControl(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F) return "byte " + std::to_string(c) + " at " + std::to_string(i);
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F)
      return "C1 control at " + std::to_string(i);
  }
  return "";
}

std::uint64_t SubmittedId(const std::string& out) {
  auto p = out.find("job ");
  return p == std::string::npos ? 0 : std::stoull(out.substr(p + 4));
}

TEST(CliInput, BytesThatAreNotUtf8ReachTheJobExactly) {
  DaemonHarness h("cli_bytes", QueuesConfig());
  h.Start();
  const std::string odd_dir = h.dir() + "/dir-\xff\xfe";
  fs::create_directories(odd_dir);
  fs::permissions(odd_dir, fs::perms::all);
  const std::string value = "v\xff\x80\xc3(end";
  const std::string arg = "a\xff\x01z";
  std::vector<std::string> env = BaseEnv(h);
  env.push_back("X=" + value);
  env.push_back("N\xff=named");  // a name that is not UTF-8: the env travels as [name, value] pairs
  // The job writes its own bytes, separated by '|', into its log; the oddly named variable from
  // the environment it was started with (a shell does not export names it cannot use).
  CliRun r = RunGpuslice({"submit", "--", "sh", "-c", "printf 'OUT<%s|%s|%s>' \"$X\" \"$1\" \"$(pwd)\"; tr '\\0' '\\n' < /proc/$$/environ | grep -a '^N.=' ",
                       "sh", arg},
                      env, odd_dir);
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::uint64_t id = SubmittedId(r.out);
  ASSERT_GT(id, 0u) << r.out;
  h.WaitJob(id, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });
  ASSERT_TRUE(h.WaitLog(id, "named")) << h.Log(id);
  const std::string log = h.Log(id);
  EXPECT_NE(log.find("OUT<" + value + "|" + arg + "|" + odd_dir + ">"), std::string::npos) << log;
  EXPECT_NE(log.find("N\xff=named"), std::string::npos) << log;

  // The API and `show --json` carry the bytes as {"b64": ...}, valid JSON, nothing lost.
  CliRun js = RunGpuslice({"show", std::to_string(id), "--json"}, BaseEnv(h), h.dir());
  ASSERT_EQ(js.rc, 0) << js.out;
  json parsed = json::parse(js.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << js.out;
  EXPECT_EQ(parsed["job"]["argv"][4], (json{{"b64", "Yf8Beg=="}})) << parsed["job"]["argv"].dump();
  EXPECT_TRUE(parsed["job"]["cwd"].is_object()) << parsed["job"]["cwd"].dump();
  // And the table shows them escaped, never raw.
  CliRun show = RunGpuslice({"show", std::to_string(id)}, BaseEnv(h), h.dir());
  ASSERT_EQ(show.rc, 0) << show.out;
  EXPECT_EQ(FirstTerminalControl(show.out), "") << show.out;
  EXPECT_NE(show.out.find("a\\xff\\x01z"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("dir-\\xff\\xfe"), std::string::npos) << show.out;
  // The stored record survives a restart (the store dumps it as JSON).
  h.Terminate();
  h.Start();
  CliRun again = RunGpuslice({"show", std::to_string(id), "--json"}, BaseEnv(h), h.dir());
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_EQ(json::parse(again.out, nullptr, false)["job"]["argv"], parsed["job"]["argv"]);
}

TEST(CliInput, FlagsThatAreNotUtf8OrNotNumbersAreUsageErrorsAndTheDaemonLives) {
  DaemonHarness h("cli_flags", QueuesConfig());
  h.Start();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"submit", "--fraction", "0.5\xc3\xa9", "--", "true"}, "--fraction: GPU amount '0.5\xc3\xa9': unexpected character '\xc3\xa9'"},
      {{"submit", "--fraction", "0.5\xff", "--", "true"}, "--fraction '0.5\\xff': not valid UTF-8"},
      {{"submit", "--queue", "q\xff", "--", "true"}, "--queue 'q\\xff': not valid UTF-8"},
      {{"submit", "--fraction", "nan", "--", "true"}, "--fraction: GPU amount 'nan'"},
      {{"submit", "--fraction=-0.5", "--", "true"}, "must not be negative"},
      {{"submit", "--fraction", "2", "--", "true"}, "--fraction '2': more than one GPU"},
      {{"submit", "--mem", "10", "--", "true"}, "--mem: memory size '10': 10B is less than the minimum 1MiB"},
      {{"submit", "--mem", "2048TiB", "--", "true"}, "--mem: memory size '2048TiB': more than 1024TiB"},
      {{"submit", "--time", "1ms", "--", "true"}, "--time: duration '1ms': 1ms is less than the minimum 1s"},
      {{"submit", "--time", "99999999999999d", "--", "true"}, "--time: duration '99999999999999d'"},
      {{"submit", "--queue", "training", "--gpus", "0", "--", "true"}, "--gpus 0: must be a whole number of devices 1..1024"},
      {{"submit", "--queue", "training", "--gpus", "5000", "--", "true"}, "--gpus 5000"},
      {{"top", "--once", "--interval=-1"}, "--interval: duration '-1': must not be negative"},
      {{"top", "--interval", "0"}, "--interval: duration '0': 0ms is less than the minimum 100ms"},
      {{"top", "--interval", "nan"}, "--interval: duration 'nan'"},
      {{"top", "--interval", "2h"}, "--interval: duration '2h': more than the maximum 1h"},
      {{"serve", "--tick", "0"}, "--tick: duration '0': 0ms is less than the minimum 1ms"},
      {{"serve", "--sample-interval", "1us"}, "--sample-interval: duration '1us'"},
      {{"profile", "--interval", "0", "--", "true"}, "--interval: duration '0': 0ms is less than the minimum 1ms"},
      {{"profile", "--pid=-1", "--", "true"}, "--pid: Value -1 not in range 1 to"},
      {{"profile", "--device=-3", "--", "true"}, "--device: Value -3 not in range 0 to 1023"},
      {{"record", "--out", "/dev/null", "--interval", "0"}, "--interval: duration '0'"},
  };
  for (const Case& c : cases) {
    CliRun r = RunGpuslice(c.args, BaseEnv(h), h.dir(), std::chrono::seconds(10));
    EXPECT_EQ(r.rc, 2) << c.args[1] << " " << c.args[2] << ":\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << "want: " << c.says << "\ngot: " << r.out;
    EXPECT_EQ(FirstTerminalControl(r.out), "") << r.out;
  }
  // The daemon applies the same bounds to any client, and still answers.
  auto cl = h.Client();
  for (auto [field, value, says] : {std::tuple{"mem", "10", "field 'mem': memory size '10': 10B is less than"},
                                    {"time", "1ms", "field 'time': duration '1ms'"},
                                    {"time", "36501d", "longer than 100 years"}}) {
    auto r = cl.Post("/v1/jobs", {{"argv", {"true"}}, {field, value}});
    ASSERT_FALSE(r.ok()) << field << "=" << value;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(cl.Get("/v1/health").ok());
  auto jobs = cl.Get("/v1/jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE((*jobs)["jobs"].empty()) << "no bad flag created a job: " << jobs->dump();
}

TEST(CliInput, SubmittedTextCannotInjectTerminalControlOrForgeRows) {
  DaemonHarness h("cli_inject", QueuesConfig());
  h.Start();
  const std::string forged = "\n99  root  training  running  8 GPUs  1  1h  FORGED";
  const std::uint64_t id = h.Submit({"sh", "-c", "sleep 30", "\x1b[2J\x1b]0;title\x07", forged, "\xc2\x9b" "31m", "\r\t\x7f"});
  ASSERT_GT(id, 0u);
  for (const auto& args : std::vector<std::vector<std::string>>{{"ps"}, {"ps", "--all"}, {"show", std::to_string(id)}}) {
    CliRun r = RunGpuslice(args, BaseEnv(h), h.dir());
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(FirstTerminalControl(r.out), "") << args[0] << ":\n" << r.out;
    std::istringstream lines(r.out);
    std::string line;
    int rows = 0;
    while (std::getline(lines, line)) {
      EXPECT_NE(line.rfind("99 ", 0), 0u) << "forged row: " << line;
      if (args[0] == "ps" && line.rfind(std::to_string(id) + " ", 0) == 0) ++rows;
    }
    if (args[0] == "ps") {
      EXPECT_EQ(rows, 1) << r.out;
    }
  }
  CliRun show = RunGpuslice({"show", std::to_string(id)}, BaseEnv(h), h.dir());
  EXPECT_NE(show.out.find("sleep 30 \\e[2J\\e]0;title\\x07 \\n99  root"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("\\u009b31m \\r\\t\\x7f"), std::string::npos) << show.out;
  // --json: valid JSON holding the exact text.
  CliRun js = RunGpuslice({"ps", "--json"}, BaseEnv(h), h.dir());
  json parsed = json::parse(js.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << js.out;
  ASSERT_EQ(parsed["jobs"].size(), 1u);
  EXPECT_EQ(parsed["jobs"][0]["argv"][4], forged);
}

TEST(CliInput, ArgvAndEnvSizesAreCappedAtSubmitNamingTheField) {
  DaemonHarness h("cli_caps", QueuesConfig());
  h.Start();
  auto cl = h.Client();
  struct Case {
    json body;
    std::string says;
  };
  std::vector<std::string> many(4097, "x");
  many[0] = "true";
  json big_env = json::object();
  for (int i = 0; i < 4097; ++i) big_env["V" + std::to_string(i)] = "1";
  std::vector<std::string> heavy(10, std::string(127 * 1024, 'a'));  // 9 x 127 KiB: over 1 MiB in all
  heavy[0] = "true";
  const std::vector<Case> cases = {
      {{{"argv", many}}, "field 'argv': 4097 elements, at most 4096"},
      {{{"argv", {"true"}}, {"env", big_env}}, "field 'env': 4097 entries, at most 4096"},
      {{{"argv", {"true", std::string(129 * 1024, 'a')}}}, "field 'argv': element 1 is 132096 bytes, at most 131072"},
      {{{"argv", {"true"}}, {"env", {{"BIG", std::string(128 * 1024, 'b')}}}}, "field 'env': entry 'BIG' is 131076 bytes"},
      {{{"argv", heavy}}, "fields 'argv' and 'env': 1170446 bytes together, at most 1048576"},
      {json::parse(R"({"argv": ["true", {"b64": "!!"}]})"), "field 'argv': element 1: 'b64' is not valid base64"},
      {json::parse(R"({"argv": ["true", 5]})"), "field 'argv': element 1: expected a string"},
      {json::parse(R"({"argv": ["true"], "cwd": {"b64": "L3RtcABi"}})"), "field 'cwd'"},  // "/tmp\0b"
      {json::parse(R"({"argv": ["true"], "env": [{"b64": "QT1C"}, "v"]})"), "field 'env': element 0 is not [name, value]"},
      {json::parse(R"({"argv": ["true"], "env": [[{"b64": "QT1C"}, "v"]]})"), "field 'env': entry 'A=B'"},
  };
  for (const Case& c : cases) {
    auto r = cl.Post("/v1/jobs", c.body);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << "want: " << c.says << "\ngot: "
                                                                    << r.status().message();
  }
  auto jobs = cl.Get("/v1/jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE((*jobs)["jobs"].empty()) << jobs->dump().substr(0, 500);
  // At the caps, a job is accepted and starts.
  std::vector<std::string> at_cap(4096, "x");
  at_cap[0] = "true";
  EXPECT_GT(h.Submit(at_cap), 0u);
}

TEST(CliInput, ADirectoryAsServeConfigIsAnErrorNamingThePath) {
  const std::string dir = fs::temp_directory_path() / ("gs_cfgdir_" + std::to_string(getpid()));
  fs::create_directories(dir);
  CliRun r = RunGpuslice({"serve", "--simulate", "1xH100-80GB", "--state-dir", dir + "/state", "--socket",
                       dir + "/s.sock", "--config", dir},
                      {"PATH=/usr/bin:/bin"}, dir, std::chrono::seconds(10));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, -2) << "serve started with the built-in queues:\n" << r.out;
  EXPECT_NE(r.out.find("'" + dir + "': is a directory"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::testing_e2e

namespace gpuslice::testing_e2e {
namespace {

TEST(CliInput, InvisibleAndDirectionFormattingCharactersAreShownNotObeyed) {
  DaemonHarness h("cli_bidi", QueuesConfig());
  h.Start();
  // "rm -rf ~ #\u202egpj.tac" reads as "cat.jpg" to the eye once reordered; U+200B hides text.
  const std::uint64_t id = h.Submit({"sh", "-c", "sleep 30", "#\xe2\x80\xae" "gpj.tac", "a\xe2\x80\x8b" "b", "\xe2\x81\xa6x"});
  ASSERT_GT(id, 0u);
  for (const auto& args : std::vector<std::vector<std::string>>{{"ps"}, {"show", std::to_string(id)}}) {
    CliRun r = RunGpuslice(args, BaseEnv(h), h.dir());
    ASSERT_EQ(r.rc, 0) << r.out;
    for (const char* raw : {"\xe2\x80\xae", "\xe2\x80\x8b", "\xe2\x81\xa6"}) {
      EXPECT_EQ(r.out.find(raw), std::string::npos) << args[0] << " prints a format character raw:\n" << r.out;
    }
    if (args[0] == "show") {
      EXPECT_NE(r.out.find("#\\u202egpj.tac a\\u200bb \\u2066x"), std::string::npos) << r.out;
    }
  }
}

TEST(CliInput, EmptyFlagValuesAreErrorsAndJsonErrorsAreJson) {
  DaemonHarness h("cli_empty", QueuesConfig());
  h.Start();
  for (const char* flag : {"--fraction", "--queue", "--mem", "--time", "--kind", "--model"}) {
    CliRun r = RunGpuslice({"submit", flag, "", "--", "true"}, BaseEnv(h), h.dir());
    EXPECT_EQ(r.rc, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find(std::string(flag) + " '': an empty value"), std::string::npos) << r.out;
  }
  auto jobs = h.Client().Get("/v1/jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ((*jobs)["jobs"].size(), 0u) << "nothing was submitted";
  for (const auto& [args, code, rc] : std::vector<std::tuple<std::vector<std::string>, std::string, int>>{
           {{"show", "999", "--json"}, "NOT_FOUND", 3},
           {{"submit", "--json", "--fraction", "2", "--", "true"}, "INVALID_ARGUMENT", 2},
           {{"ps", "--json", "--socket", h.dir() + "/none.sock"}, "UNAVAILABLE", 5}}) {
    CliRun r = RunGpuslice(args, BaseEnv(h), h.dir());
    EXPECT_EQ(r.rc, rc) << args[0] << ": " << r.out;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << args[0] << " --json printed a plain error:\n" << r.out;
    EXPECT_EQ(j["error"]["code"], code) << r.out;
  }
  CliRun cancel = RunGpuslice({"cancel", "999", "--json"}, BaseEnv(h), h.dir());
  EXPECT_EQ(cancel.rc, 3) << cancel.out;
  json j = json::parse(cancel.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << cancel.out;
  EXPECT_EQ(j["errors"][0]["id"], 999);
  EXPECT_EQ(j["errors"][0]["error"]["code"], "NOT_FOUND");
}

TEST(CliInput, SimChecksItsPoliciesOutputAndTraceBeforeRunning) {
  const std::string dir = fs::temp_directory_path() / ("gs_sim_input_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir + "/t.csv") << "submit,duration,gpus\n0,60,1\n";
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  // Each would otherwise run (the fgd protocol takes minutes) before failing, or print an
  // empty table and exit 0; a device would be read forever.
  for (const auto& [args, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"sim", "fgd", "--policy", ""}, "--policy '': names no placement policy"},
           {{"sim", "fgd", "--policy", ","}, "names no placement policy"},
           {{"sim", "fgd", "--policy", "fgd", "--out", "/proc/gs-no-such-dir"}, "--out '/proc/gs-no-such-dir'"},
           {{"sim", "replay", "--trace", dir + "/t.csv", "--policy", ""}, "names no placement policy"},
           {{"sim", "replay", "--trace", "/dev/zero"}, "/dev/zero: not a regular file"},
           {{"sim", "replay", "--trace", dir}, "not a regular file"}}) {
    CliRun r = RunGpuslice(args, env, dir, std::chrono::seconds(30));
    EXPECT_EQ(r.rc, 2) << args[1] << " " << args.back() << ": " << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << r.out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::testing_e2e
