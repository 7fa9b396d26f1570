// Fuzzes the Kineto / PyTorch profiler trace reader as `gpuslice profile --trace FILE` runs
// it: ParseTraceText (the SAX parser; ParseTraceFile only adds reading and gunzip), then the
// step analysis, the diagnosis and the three reports built from the parsed trace. The reader
// catches nlohmann's exceptions itself; production catches nothing else, nor does this target.
#include <limits>

#include "fuzz/fuzz_util.h"
#include "profile/analysis.h"
#include "profile/diagnosis.h"
#include "profile/report.h"
#include "profile/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  using namespace gpuslice::profile;
  auto parsed = ParseTraceText(fuzz::AsText(data, size), "fuzz.json");
  if (!parsed.ok()) {
    fuzz::TouchError(parsed.status());
    return 0;
  }
  for (const auto& s : parsed->steps) fuzz::Check(s.start <= s.end, "a step that ends before it starts");
  for (const auto& g : parsed->gpu) {
    fuzz::Check(g.start <= g.end, "a GPU event that ends before it starts");
    fuzz::Check(g.name_id < static_cast<std::int32_t>(parsed->kernel_names.size()), "kernel name id out of range");
  }
  fuzz::Check(parsed->kernel_names.size() == parsed->kernel_classes.size(), "kernel names and classes differ");
  auto analysis = AnalyseTrace(*parsed, 60);
  if (!analysis.ok()) {
    fuzz::TouchError(analysis.status());
    return 0;
  }
  std::vector<TraceAnalysis> ranks = {std::move(analysis).value()};
  std::vector<Finding> findings = Diagnose(EvidenceFromTraces(ranks));
  std::string text = TraceReportText(ranks, findings);
  std::string json = TraceReportJson(ranks, findings).dump(2);
  std::string svg = TraceTimelineSvg(ranks);
  fuzz::Check(!text.empty() && !json.empty() && !svg.empty(), "an empty report");
  return 0;
}
