// Fuzzes what the CLI reads from whatever answers on the daemon's socket (a newer daemon, a
// broken one, a hostile process listening there): the bounded JSON parse every answer goes
// through (api::ParseBoundedJson, as ApiClient::Decode calls it), an error answer
// (api::StatusFromResponse) and the typed views the commands print (JobsFromJson, ...), and how
// an error message shows a value (api::ShownJson: never nested, always bounded).
//
// Input: an answer body (any bytes). Properties: nothing escapes as an exception or crashes
// (a value nested 100,000 deep used to overflow the stack of a recursive walk); a value the
// parse accepts is nested at most the limit; ShownJson of any part of it is short.
#include <nlohmann/json.hpp>

#include "api/bounded_json.h"
#include "api/protocol.h"
#include "api/views.h"
#include "fuzz/fuzz_util.h"

namespace gpuslice::fuzz {
namespace {

constexpr api::JsonLimits kLimits{.max_bytes = std::size_t{1} << 30, .max_depth = 64};

int Depth(const nlohmann::json& j) {
  if (!j.is_structured()) return 0;
  int d = 0;
  for (const auto& v : j) d = std::max(d, Depth(v));
  return d + 1;
}

}  // namespace
}  // namespace gpuslice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string body(fuzz::AsText(data, size));
  // An error answer: always a Status, never a throw.
  for (int http : {400, 404, 409, 500, 503}) {
    Status st = api::StatusFromResponse(http, body);
    fuzz::Check(!st.ok(), "an error answer read as OK");
    fuzz::Check(st.message().size() < 8192, "an error answer's message is unbounded");
  }
  auto j = api::ParseBoundedJson(body, "answer", fuzz::kLimits);
  if (!j.ok()) {
    fuzz::Check(j.status().message().size() < 512, "the parse error echoes the input");
    return 0;
  }
  fuzz::Check(fuzz::Depth(*j) <= fuzz::kLimits.max_depth, "accepted JSON deeper than the limit");
  fuzz::Check(api::ShownJson(*j).size() <= 128, "ShownJson is not bounded");
  if (j->is_object()) {
    for (const auto& [k, v] : j->items()) {
      fuzz::Check(api::ShownJson(v).size() <= 128, "ShownJson of a field is not bounded");
    }
  }
  // The views the commands print: errors, never exceptions.
  (void)api::JobsFromJson(*j);
  (void)api::EventsFromJson(*j);
  (void)api::DevicesFromJson(*j);
  (void)api::SlicesFromJson(*j);
  (void)api::QueuesFromJson(*j);
  if (j->is_object() && j->contains("job")) (void)api::JobView::FromJson((*j)["job"]);
  (void)api::DumpJson(*j);
  return 0;
}
