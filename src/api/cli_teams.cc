// gpuslice teams: GET /v1/teams as a table (docs/teams.md). Every value reaches the terminal
// through the printing helpers (cli_detail.h).
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/cli.h"
#include "api/cli_detail.h"
#include "core/units.h"

namespace gpuslice::api {
namespace {

using nlohmann::json;

// A milli-GPU field as "2", "0.5", "-" when 0, or "none" when absent or null.
std::string Amount(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return "none";
  const MilliGpu m = it->get<MilliGpu>();
  return m == 0 ? "-" : FormatMilliGpu(m);
}

// Decayed GPU-hours ("1.08"), "unknown" when the daemon could not say.
std::string Usage(const json& t) {
  auto it = t.find("usage_gpu_hours");
  if (it == t.end() || !it->is_number()) return "unknown";
  return fmt::format("{:.2f}", it->get<double>());
}

std::string Rank(const json& t) {
  auto it = t.find("rank");
  return it == t.end() || !it->is_number_integer() ? "unknown" : std::to_string(it->get<int>());
}

Result<json> Field(const json& o, const char* key, json::value_t type) {
  auto it = o.find(key);
  if (it == o.end() || it->type() != type)
    return InvalidArgument(fmt::format("the daemon's answer: field '{}' is missing or of the wrong type", key));
  return *it;
}

}  // namespace

Status Teams(const ClientFlags& c) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, cli_detail::Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get("/v1/teams"));
  if (c.json) {
    cli_detail::PrintJson(r);
    return Status::Ok();
  }
  cli_detail::Banner(r);
  GPUSLICE_ASSIGN_OR_RETURN(json enabled, Field(r, "enabled", json::value_t::boolean));
  if (!enabled.get<bool>()) {
    cli_detail::Line("no teams: this site's config has no [teams] (docs/teams.md)");
    return Status::Ok();
  }
  GPUSLICE_ASSIGN_OR_RETURN(json teams, Field(r, "teams", json::value_t::array));
  std::vector<std::vector<std::string>> rows;
  for (const json& t : teams) {
    const std::string name = cli_detail::Str(t, "name");
    const std::string weight = t.contains("weight") && t["weight"].is_number_integer()
                                   ? std::to_string(t["weight"].get<int>()) : "?";
    const std::string usage = Usage(t), rank = Rank(t);
    const json queues = t.value("queues", json::array());
    if (queues.empty()) rows.push_back({name, "-", "-", "-", "-", "-", "none", "0", weight, usage, rank});
    for (const json& q : queues) {
      rows.push_back({name, cli_detail::Str(q, "queue"), Amount(q, "guaranteed"), Amount(q, "held"),
                      Amount(q, "borrowed"), Amount(q, "lent"), Amount(q, "limit"),
                      std::to_string(q.value("waiting", 0)), weight, usage, rank});
    }
  }
  for (const json& q : r.value("no_team", json::array()))
    rows.push_back({"(no team)", cli_detail::Str(q, "queue"), "-", Amount(q, "held"), Amount(q, "held"), "-", "none",
                    std::to_string(q.value("waiting", 0)), "-", "-", "last"});
  cli_detail::PrintTable({"TEAM", "QUEUE", "GUARANTEED", "HELD", "BORROWED", "LENT", "LIMIT", "WAITING", "WEIGHT",
                          "USAGE(GPU-h)", "RANK"},
                         rows);
  for (const json& n : r.value("notes", json::array()))
    if (n.is_string()) cli_detail::Line("note: " + n.get<std::string>());
  return Status::Ok();
}

}  // namespace gpuslice::api
