#pragma once
// The client subcommands of the gpuslice CLI (submit, ps, show, cancel, logs, devices,
// queues, top). apps/gpuslice/cmd_client.cc only parses flags and calls these. Each prints
// its output (a readable table, or JSON with --json) and returns the Status that decides
// the exit code. Not thread-safe (writes to stdout).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::api {

struct ClientFlags {
  std::string socket;      // "" : DefaultSocket(); "tcp://host:port" for TCP
  std::string token_file;  // TCP bearer token
  bool json = false;
};

struct SubmitFlags {
  std::string queue;
  std::optional<int> gpus;
  std::string fraction;
  std::string mem;
  std::string time;
  std::string kind;
  std::string model;
  std::vector<std::string> command;
};

Status Submit(const ClientFlags& c, const SubmitFlags& s);
Status Ps(const ClientFlags& c, bool all, const std::string& user, const std::string& state);
Status Show(const ClientFlags& c, std::uint64_t id);
Status CancelJobs(const ClientFlags& c, const std::vector<std::uint64_t>& ids);
Status Logs(const ClientFlags& c, std::uint64_t id, bool follow);
Status Devices(const ClientFlags& c);
Status Queues(const ClientFlags& c);
Status Top(const ClientFlags& c, bool once, double interval_s);

}  // namespace gpuslice::api
