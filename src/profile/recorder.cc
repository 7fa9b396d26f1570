#include "profile/recorder.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <string_view>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "devices/backend.h"

namespace gpuslice::profile {
namespace {

Micros RealtimeMicros() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<Micros>(ts.tv_sec) * kSecond + ts.tv_nsec / 1000;
}

Micros MonotonicMicros() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Micros>(ts.tv_sec) * kSecond + ts.tv_nsec / 1000;
}

void SleepUntilMonotonic(Micros t) {
  timespec ts{};
  ts.tv_sec = t / kSecond;
  ts.tv_nsec = (t % kSecond) * 1000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// The device figures through the one sampler (agent::Agent), as the daemon and the Slurm
// agent read them: the profiled device is bound as a whole slice, so a figure the driver
// cannot give stays unknown here too.
class AgentSampler : public GpuSampler {
 public:
  AgentSampler(devices::DeviceBackend* b, int index)
      : b_(b), index_(index), agent_(*b, agent::AgentOptions{}) {
    agent::SliceBinding bd;
    bd.slice = SliceId(1);
    bd.kind = sched::SliceKind::kWhole;
    bd.devices = {DeviceIndex(static_cast<std::uint32_t>(index))};
    agent_.Bind(bd);
  }
  std::string Describe() const override {
    return fmt::format("{} ({}), device {}", b_->kind(), b_->description(), index_);
  }
  Result<GpuReading> Read() override {
    const agent::Round round = agent_.SampleOnce();
    const devices::DeviceSample* sample = nullptr;
    for (const auto& s : round.samples) {
      if (s.index.value() == static_cast<std::uint32_t>(index_)) sample = &s;
    }
    if (sample == nullptr) {
      for (const auto& e : round.errors) return e;
      return NotFound(fmt::format("device {}: not sampled", index_));
    }
    GpuReading r;
    for (const auto& a : round.slices) {
      if (a.sm_util.ok()) r.util_permille = a.sm_util.value();
      if (a.memory_used.ok()) r.memory_used = a.memory_used.value();
    }
    if (sample->memory_total.ok()) r.memory_total = sample->memory_total.value();
    return r;
  }

 private:
  devices::DeviceBackend* b_;
  int index_;
  agent::Agent agent_;
};

ProcState Classify(const ProcStat& now, const ProcStat* before, std::int64_t interval_ticks) {
  if (now.state == 'Z' || now.state == 'X') return ProcState::kGone;
  std::int64_t blk = before != nullptr ? now.blkio_ticks - before->blkio_ticks : 0;
  if (now.state == 'D' || blk > 0) return ProcState::kIoWait;
  std::int64_t cpu = before != nullptr ? now.cpu_ticks - before->cpu_ticks : 0;
  if (now.state == 'R' || (interval_ticks > 0 && 2 * cpu >= interval_ticks)) return ProcState::kRunning;
  return ProcState::kSleeping;
}

// Launcher processes above the main one are neither main nor workers. `seen` holds this
// tick's snapshot of the tree.
bool IsAncestor(int p, int main_pid, const std::map<int, ProcStat>& seen, int root) {
  if (p == main_pid) return false;
  int cur = main_pid;
  for (int depth = 0; depth < 16 && cur != root; ++depth) {
    auto it = seen.find(cur);
    int parent = it != seen.end() ? it->second.ppid : -1;
    if (parent < 0) {
      auto st = ReadProcStat(cur);
      if (!st.ok()) return false;
      parent = st->ppid;
    }
    if (parent == p) return true;
    cur = parent;
  }
  return p == root && main_pid != root;
}

}  // namespace

std::unique_ptr<GpuSampler> MakeBackendSampler(devices::DeviceBackend* backend, int device_index) {
  return std::make_unique<AgentSampler>(backend, device_index);
}

std::string_view ProcStateName(ProcState s) {
  switch (s) {
    case ProcState::kRunning: return "running";
    case ProcState::kIoWait: return "io_wait";
    case ProcState::kSleeping: return "sleeping";
    case ProcState::kGone: return "gone";
  }
  return "?";
}

Result<ProcStat> ReadProcStat(int pid) {
  std::string text;
  if (!ReadWholeFile(fmt::format("/proc/{}/stat", pid), &text)) {
    return NotFound(fmt::format("process {} does not exist", pid));
  }
  auto close = text.rfind(')');
  if (close == std::string::npos) return Internal(fmt::format("/proc/{}/stat: no ')' in '{}'", pid, text));
  std::istringstream in(text.substr(close + 1));
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  if (tok.size() < 13) return Internal(fmt::format("/proc/{}/stat: only {} fields", pid, tok.size() + 2));
  ProcStat s;
  s.pid = pid;
  s.state = tok[0].empty() ? '?' : tok[0][0];
  s.ppid = std::atoi(tok[1].c_str());
  s.cpu_ticks = std::atoll(tok[11].c_str()) + std::atoll(tok[12].c_str());  // fields 14, 15
  if (tok.size() > 39) s.blkio_ticks = std::atoll(tok[39].c_str());        // field 42
  std::string io;
  if (ReadWholeFile(fmt::format("/proc/{}/io", pid), &io)) {
    auto p = io.find("\nread_bytes:");
    if (p != std::string::npos) s.read_bytes = std::atoll(io.c_str() + p + 12);
  }
  return s;
}

std::vector<int> ProcessTree(int root) {
  std::multimap<int, int> children;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      int pid = std::atoi(e->d_name);
      std::string text;
      if (!ReadWholeFile(fmt::format("/proc/{}/stat", pid), &text)) continue;
      auto close = text.rfind(')');
      if (close == std::string::npos || close + 4 >= text.size()) continue;
      int ppid = std::atoi(text.c_str() + close + 4);  // ") S <ppid>"
      children.emplace(ppid, pid);
    }
    closedir(d);
  }
  std::vector<int> out{root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto [b, e] = children.equal_range(out[i]);
    for (auto it = b; it != e; ++it) out.push_back(it->second);
  }
  return out;
}

int MainProcess(int root, const std::map<int, ProcStat>& tree) {
  static constexpr std::string_view kLaunchers[] = {"sh", "bash", "dash", "zsh", "env", "pyenv",
                                                    "timeout", "nice", "nohup", "stdbuf", "time",
                                                    "uv", "conda", "srun", "numactl", "taskset"};
  int main = root;
  for (int depth = 0; depth < 8; ++depth) {
    std::string comm;
    if (!ReadWholeFile(fmt::format("/proc/{}/comm", main), &comm)) break;
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (std::find(std::begin(kLaunchers), std::end(kLaunchers), comm) == std::end(kLaunchers)) break;
    int child = 0, children = 0;
    for (const auto& [p, st] : tree) {
      if (p != main && st.ppid == main) {
        child = p;
        ++children;
      }
    }
    if (children != 1) break;
    main = child;
  }
  return main;
}

int MainProcess(int root) {
  std::map<int, ProcStat> tree;
  for (int p : ProcessTree(root)) {
    auto st = ReadProcStat(p);
    if (st.ok()) tree[p] = *st;
  }
  return MainProcess(root, tree);
}

std::optional<std::int64_t> NetworkRxBytes(int pid) {
  std::ifstream in(fmt::format("/proc/{}/net/dev", pid));
  if (!in) return std::nullopt;
  std::string line;
  std::int64_t total = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n <= 2) continue;  // two header lines
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name == "lo") continue;
    total += std::atoll(line.c_str() + colon + 1);
  }
  return total;
}

Result<std::vector<StepMark>> ReadStepFile(const std::string& path) {
  std::ifstream in(path);
  std::vector<StepMark> out;
  if (!in) return out;  // no markers written: the program did not use gpuslice_steps
  std::map<std::int64_t, std::size_t> index;  // step -> position in out
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::int64_t step = 0, ns = 0;
    std::string mark;
    try {  // parsing edge
      auto j = nlohmann::json::parse(line);
      step = j.at("step").get<std::int64_t>();
      mark = j.at("mark").get<std::string>();
      ns = j.at("ns").get<std::int64_t>();
    } catch (const std::exception& e) {
      return InvalidArgument(fmt::format("{}:{}: bad step marker '{}': {}", path, lineno, line, e.what()));
    }
    Micros t = ns / 1000;
    auto it = index.find(step);
    if (mark == "start") {
      index[step] = out.size();
      out.push_back({step, t, std::nullopt, std::nullopt});
    } else if (it == index.end()) {
      return InvalidArgument(fmt::format("{}:{}: mark '{}' for step {} before its 'start'", path, lineno, mark, step));
    } else if (mark == "data") {
      out[it->second].data_ready = t;
    } else if (mark == "end") {
      out[it->second].end = t;
    } else {
      return InvalidArgument(fmt::format("{}:{}: unknown mark '{}' (expected start, data or end)", path, lineno, mark));
    }
  }
  return out;
}

Result<Recording> Record(const RecordOptions& o, GpuSampler* gpu) {
  if (o.command.empty() == (o.attach_pid == 0)) {
    return InvalidArgument("profile: give either a command to run or --pid, not both");
  }
  if (o.interval < kMillisecond) {
    return InvalidArgument(fmt::format("--interval {}µs: must be at least 1ms", o.interval));
  }
  Recording rec;
  if (gpu != nullptr) rec.gpu_description = gpu->Describe();
  int pid = o.attach_pid;
  bool own = false;
  if (pid == 0) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
    std::vector<char*> argv;
    for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid = fork();
    if (pid < 0) return Internal(fmt::format("fork: {}", std::strerror(errno)));
    if (pid == 0) {
      close(fds[0]);
      if (!o.step_file.empty()) setenv("GPUSLICE_STEP_FILE", o.step_file.c_str(), 1);
      if (!o.python_dir.empty()) {
        const char* old = getenv("PYTHONPATH");
        std::string pp = o.python_dir + (old != nullptr && *old != 0 ? std::string(":") + old : "");
        setenv("PYTHONPATH", pp.c_str(), 1);
      }
      execvp(argv[0], argv.data());
      int err = errno;
      ssize_t ignored = write(fds[1], &err, sizeof err);
      (void)ignored;
      _exit(127);
    }
    close(fds[1]);
    int err = 0;
    ssize_t n = read(fds[0], &err, sizeof err);
    close(fds[0]);
    if (n == static_cast<ssize_t>(sizeof err)) {
      waitpid(pid, nullptr, 0);
      return InvalidArgument(fmt::format("cannot run '{}': {}", o.command[0], std::strerror(err)));
    }
    own = true;
  } else if (kill(pid, 0) != 0 && errno == ESRCH) {
    return NotFound(fmt::format("--pid {}: no such process", pid));
  }
  rec.pid = pid;
  rec.start = RealtimeMicros();
  const std::int64_t hz = sysconf(_SC_CLK_TCK);
  const std::int64_t interval_ticks = o.interval * hz / kSecond;
  std::map<int, ProcStat> prev;
  std::map<int, int> main_seen;  // main pid -> samples it was the main process in
  std::optional<std::int64_t> prev_net;
  Micros prev_t = rec.start;
  if (gpu != nullptr) (void)gpu->Read();  // open the first utilisation window
  const Micros mono_start = MonotonicMicros();
  for (std::int64_t tick = 1;; ++tick) {
    SleepUntilMonotonic(mono_start + tick * o.interval);
    bool ended = false;
    if (own) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        ended = true;
        rec.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    } else if (kill(pid, 0) != 0 && errno == ESRCH) {
      ended = true;
    }
    Sample s;
    s.t = RealtimeMicros();
    const double dt = static_cast<double>(std::max<Micros>(1, s.t - prev_t)) / kSecond;
    if (gpu != nullptr) {
      auto r = gpu->Read();
      if (r.ok()) {
        s.gpu_util_permille = r->util_permille;
        s.gpu_memory_used = r->memory_used;
        s.gpu_memory_total = r->memory_total;
      } else if (rec.gpu_error.empty()) {
        rec.gpu_error = r.status().ToString();
      }
    }
    // One snapshot of the tree for the whole sample: a child forked between choosing the main
    // process and counting workers would otherwise be counted as a worker of its launcher.
    std::map<int, ProcStat> now;
    for (int p : ProcessTree(pid)) {
      auto st = ReadProcStat(p);
      if (st.ok()) now[p] = *st;
    }
    std::int64_t read_delta = 0;
    const int main_pid = MainProcess(pid, now);
    if (!ended) ++main_seen[main_pid];
    for (const auto& [p, stat] : now) {
      const ProcStat* st = &stat;
      const ProcStat* before = prev.count(p) ? &prev[p] : nullptr;
      ProcState state = Classify(*st, before, interval_ticks);
      std::int64_t cpu = before ? st->cpu_ticks - before->cpu_ticks : 0;
      int permille = static_cast<int>(static_cast<double>(cpu) / static_cast<double>(hz) / dt * 1000.0 + 0.5);
      if (st->read_bytes) read_delta += *st->read_bytes - (before && before->read_bytes ? *before->read_bytes : 0);
      if (p == main_pid) {
        s.main_state = state;
        s.main_cpu_permille = permille;
      } else if (state != ProcState::kGone && !IsAncestor(p, main_pid, now, pid)) {
        ++s.workers;
        s.workers_cpu_permille += permille;
        if (state == ProcState::kRunning) ++s.workers_running;
        if (state == ProcState::kIoWait) ++s.workers_iowait;
      }
    }
    if (!prev.empty() || tick > 1) s.read_bytes_per_s = static_cast<std::int64_t>(static_cast<double>(read_delta) / dt);
    if (auto net = NetworkRxBytes(pid)) {
      if (prev_net) s.net_rx_bytes_per_s = static_cast<std::int64_t>(static_cast<double>(*net - *prev_net) / dt);
      prev_net = net;
    }
    rec.max_workers = std::max(rec.max_workers, s.workers);
    prev = std::move(now);
    prev_t = s.t;
    if (!ended || !rec.samples.empty()) rec.samples.push_back(s);
    if (ended) break;
    if (o.max_duration > 0 && s.t - rec.start >= o.max_duration) break;
  }
  rec.end = RealtimeMicros();
  rec.main_pid = pid;
  int best = 0;
  for (auto [p, n] : main_seen) {
    if (n > best) { best = n; rec.main_pid = p; }
  }
  if (!o.step_file.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(rec.steps, ReadStepFile(o.step_file));
  }
  return rec;
}

}  // namespace gpuslice::profile
