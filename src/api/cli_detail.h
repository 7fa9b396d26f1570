#pragma once
// Internal to the CLI's client commands (cli.cc, cli_submit.cc): connecting, and the printing
// helpers through which every value reaches the terminal (see cli.h). Not part of the API.
// Not thread-safe (they write to stdout).

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/cli.h"
#include "api/client.h"
#include "core/status.h"

namespace gpuslice::api::cli_detail {

// A client for the flags' socket (or tcp://) with the token file's token (cli.h).
using api::Connect;
// Strings that are not UTF-8 escaped, so dump() cannot throw.
nlohmann::json ValidJson(nlohmann::json j);
void PrintJson(const nlohmann::json& j);
// One line through ForTerminal.
void Line(std::string_view text);
// A text or byte-string field of a daemon answer, decoded ("" when absent or malformed).
std::string Str(const nlohmann::json& j, std::string_view key);
std::string Joined(const nlohmann::json& list, std::string_view sep);
// "*** SIMULATED devices ... ***" when the answer says so.
void Banner(const nlohmann::json& j);
// Left-aligned columns, widths from the content, every cell through ForTerminal.
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
// "2 GPUs", "0.25 GPU" or "default".
std::string Resources(const nlohmann::json& job);

}  // namespace gpuslice::api::cli_detail
