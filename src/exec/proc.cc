#include "exec/proc.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gpuslice::exec {
namespace {

struct Stat {
  char state = 0;
  long pgrp = 0;
  std::uint64_t start_ticks = 0;
};

// Parses /proc/<pid>/stat. The command name (field 2) may hold spaces and ')' so fields are
// counted from the last ')'.
std::optional<Stat> ReadStat(const char* pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%s/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return std::nullopt;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return std::nullopt;
  p += 2;  // ") " then field 3
  Stat st;
  st.state = *p;
  int field = 3;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') {
      ++field;
      if (field == 5) st.pgrp = std::strtol(p + 1, nullptr, 10);
    }
    ++p;
  }
  if (field != 22) return std::nullopt;
  st.start_ticks = std::strtoull(p, nullptr, 10);
  return st;
}

}  // namespace

std::optional<std::uint64_t> ProcessStartTicks(int pid) {
  auto st = ReadStat(std::to_string(pid).c_str());
  if (!st || st->state == 'Z' || st->state == 'X') return std::nullopt;
  return st->start_ticks;
}

std::optional<int> ProcessGroupOf(int pid) {
  auto st = ReadStat(std::to_string(pid).c_str());
  if (!st) return std::nullopt;
  return static_cast<int>(st->pgrp);
}

bool ProcessGroupAlive(int pgid) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return false;
  bool alive = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    auto st = ReadStat(e->d_name);
    if (st && st->pgrp == pgid && st->state != 'Z' && st->state != 'X') {
      alive = true;
      break;
    }
  }
  closedir(d);
  return alive;
}

std::vector<int> ProcessGroupMembers(int pgid) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    auto st = ReadStat(e->d_name);
    if (st && st->pgrp == pgid && st->state != 'Z' && st->state != 'X') {
      out.push_back(std::atoi(e->d_name));
    }
  }
  closedir(d);
  return out;
}

}  // namespace gpuslice::exec
