#pragma once
// JSON encoding of store records: the SQLite store keeps each job and slice as one JSON
// document next to its indexed columns, and the API reuses it. Free functions; thread-safe.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace gpuslice::store {

// A byte string (argv element, environment name or value, cwd, path) in JSON, losslessly: a
// JSON string when it is valid UTF-8, else {"b64": "<base64 of the bytes>"}. JSON strings
// cannot hold other bytes, and nlohmann::json::dump throws on them. The API's submit body and
// job views use the same form; BytesFromJson accepts both and names `what` in its errors.
nlohmann::json BytesToJson(std::string_view bytes);
Result<std::string> BytesFromJson(const nlohmann::json& j, std::string_view what);

// argv, cwd, env and log_path are byte strings (above); env is a list of [name, value].
nlohmann::json JobToJson(const JobRecord& j);
Result<JobRecord> JobFromJson(const nlohmann::json& j);
nlohmann::json SliceToJson(const SliceRecord& s);
// A slice's typed fields as the store writes them, and back (a text it did not write: kDataLoss
// naming the field and the value).
std::string MigText(const std::optional<MigPlacement>& mig);
Result<std::optional<MigPlacement>> MigFromText(std::string_view text);
Result<SliceKind> SliceKindFromText(std::string_view text);
Result<SliceRecord> SliceFromJson(const nlohmann::json& j);

}  // namespace gpuslice::store
