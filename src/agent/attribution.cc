#include "agent/attribution.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace gpuslice::agent {
namespace {

Result<std::string> ReadFile(const std::string& path, int pid) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == EACCES) return PermissionDenied(fmt::format("{}: permission denied", path));
    return NotFound(fmt::format("process {} is gone", pid));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HoldsDevice(const SliceBinding& s, DeviceIndex d) {
  return std::find(s.devices.begin(), s.devices.end(), d) != s.devices.end();
}

bool UnderCgroup(const std::string& path, const std::string& prefix) {
  if (prefix.empty() || path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  return path.size() == prefix.size() || path[prefix.size()] == '/' || prefix.back() == '/';
}

}  // namespace

Result<ProcStat> ProcessTable::Stat(int pid) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string s, ReadFile(fmt::format("{}/{}/stat", root_, pid), pid));
  // "pid (comm) state ppid ..." — comm may contain spaces and ')', so parse after the last ')'.
  const auto close = s.rfind(')');
  if (close == std::string::npos) return Internal(fmt::format("/proc/{}/stat: unparsable", pid));
  std::istringstream rest(s.substr(close + 1));
  std::string state;
  ProcStat st;
  st.pid = pid;
  if (const auto open = s.find('('); open != std::string::npos && open < close) {
    st.comm = s.substr(open + 1, close - open - 1);
  }
  rest >> state >> st.ppid >> st.pgrp;
  // Fields 6..21 then starttime (22); we are at field 5 (pgrp) now.
  std::string skip;
  for (int f = 6; f <= 21; ++f) rest >> skip;
  rest >> st.start_time;
  if (!rest) return Internal(fmt::format("/proc/{}/stat: unparsable", pid));
  return st;
}

Result<std::string> ProcessTable::Cgroup(int pid) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string s, ReadFile(fmt::format("{}/{}/cgroup", root_, pid), pid));
  std::istringstream in(s);
  std::string line, first;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string path = line.substr(b + 1);
    if (line.compare(0, 3, "0::") == 0) return path;  // cgroup v2 unified hierarchy
    if (first.empty()) first = path;
  }
  return first;
}

Result<std::string> ProcessTable::EnvironValue(int pid, std::string_view key) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string s, ReadFile(fmt::format("{}/{}/environ", root_, pid), pid));
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find('\0', pos);
    if (end == std::string::npos) end = s.size();
    std::string_view kv(s.data() + pos, end - pos);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=') {
      return std::string(kv.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return NotFound(fmt::format("{} not set for process {}", key, pid));
}

Result<Attributor::Cached*> Attributor::Lookup(int pid) {
  GPUSLICE_ASSIGN_OR_RETURN(ProcStat st, table_.Stat(pid));
  auto it = cache_.find(pid);
  if (it != cache_.end() && it->second.start_time == st.start_time) {
    it->second.seen = true;
    return &it->second;
  }
  // New process (or a reused pid): walk its ancestry once. Ancestors never change while the
  // process lives, except when reparented to init — a reparented process has left its job's
  // tree, and cgroup/environment still identify it.
  Cached c;
  c.start_time = st.start_time;
  c.pgrp = st.pgrp;
  c.mps_server = std::string_view(st.comm).substr(0, kMpsServerComm.size()) == kMpsServerComm;
  c.ancestors.push_back(pid);
  int parent = st.ppid;
  for (int depth = 0; depth < 128 && parent > 0; ++depth) {
    c.ancestors.push_back(parent);
    auto ps = table_.Stat(parent);
    if (!ps.ok()) break;
    parent = ps->ppid;
  }
  c.cgroup = table_.Cgroup(pid).value_or("");
  c.slice_env = table_.EnvironValue(pid, kSliceEnvVar).value_or("");
  c.seen = true;
  auto [pos, inserted] = cache_.insert_or_assign(pid, std::move(c));
  return &pos->second;
}

Owner Attributor::Resolve(DeviceIndex device, const devices::ProcessSample& p,
                          const std::vector<SliceBinding>& slices, AttributionStats* stats) {
  AttributionStats ignored;
  if (stats == nullptr) stats = &ignored;
  auto is_root = [](const SliceBinding& s, int pid) {
    return std::find(s.root_pids.begin(), s.root_pids.end(), pid) != s.root_pids.end();
  };
  // MIG: the instance names its owner, even when the process is already gone.
  if (!p.mig_uuid.empty()) {
    for (const auto& s : slices) {
      if (s.mig_uuid == p.mig_uuid) {
        ++stats->attributed;
        return Owner{s.slice, false, false};
      }
    }
  }
  // A job's own top process needs no /proc (and is known even where /proc is not ours).
  for (const auto& s : slices) {
    if (HoldsDevice(s, device) && (s.mig_uuid.empty() || s.mig_uuid == p.mig_uuid) && is_root(s, p.pid)) {
      ++stats->attributed;
      return Owner{s.slice, false, false};
    }
  }
  auto looked = Lookup(p.pid);
  if (!looked.ok()) {
    if (looked.status().code() == StatusCode::kNotFound) {
      ++stats->vanished;
      return Owner{std::nullopt, false, false};
    }
    ++stats->unattributed;
    return Owner{std::nullopt, false, true};
  }
  const Cached& c = **looked;
  if (c.mps_server) {
    ++stats->mps_servers;
    return Owner{std::nullopt, true, false};
  }
  for (const auto& s : slices) {
    if (!HoldsDevice(s, device)) continue;
    if (!s.mig_uuid.empty() && s.mig_uuid != p.mig_uuid) continue;
    bool mine = c.pgrp > 0 && is_root(s, c.pgrp);
    for (int a : c.ancestors) {
      if (is_root(s, a)) mine = true;
    }
    if (!mine && UnderCgroup(c.cgroup, s.cgroup)) mine = true;
    if (!mine && !c.slice_env.empty() && c.slice_env == std::to_string(s.slice.value())) mine = true;
    if (mine) {
      ++stats->attributed;
      return Owner{s.slice, false, false};
    }
  }
  ++stats->unattributed;
  return Owner{std::nullopt, false, true};
}

void Attributor::EndRound() {
  std::erase_if(cache_, [](const auto& kv) { return !kv.second.seen; });
  for (auto& [pid, c] : cache_) c.seen = false;
}

}  // namespace gpuslice::agent
