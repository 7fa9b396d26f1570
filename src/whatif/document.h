#pragma once
// The what-if document (docs/whatif.md has its shape): every scenario's figures side by side,
// the verdict, and headlines the dashboard shows ("idle reclaim at 15m instead of 30m would
// have given back X GPU-hours, cutting Y sessions"). It is what `gpuslice whatif --json` prints
// and GET /v1/whatif returns; the terminal table, the CSV and the SVG plots are drawn from it,
// so the daemon's answer and an offline run look the same.
// Free functions; thread-safe.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "whatif/history.h"
#include "whatif/run.h"
#include "whatif/verdict.h"

namespace gpuslice::whatif {

nlohmann::json ToJson(const History& h, const WhatifSpec& spec, const std::vector<ScenarioResult>& results,
                      const Verdict& verdict);

std::string FormatTable(const nlohmann::json& doc);
// One row per scenario; per-queue waits as columns wait_p50_s.<queue>, wait_p95_s.<queue>.
std::string FormatCsv(const nlohmann::json& doc);
// whatif_gpu_hours.svg (held: busy / idle / unknown, and given back, per scenario),
// whatif_waits.svg (p95 wait per queue per scenario), whatif_verdict.svg (p95 wait per queue
// against the GPU count, every cure applied). Returns the written paths.
Result<std::vector<std::string>> WriteSvgs(const nlohmann::json& doc, const std::string& dir);

}  // namespace gpuslice::whatif
