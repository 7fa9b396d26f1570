#pragma once
// JSON encoding of store records: the SQLite store keeps each job and slice as one JSON
// document next to its indexed columns, and the API reuses it. Free functions; thread-safe.

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace gpuslice::store {

nlohmann::json JobToJson(const JobRecord& j);
Result<JobRecord> JobFromJson(const nlohmann::json& j);
nlohmann::json SliceToJson(const SliceRecord& s);
Result<SliceRecord> SliceFromJson(const nlohmann::json& j);

}  // namespace gpuslice::store
