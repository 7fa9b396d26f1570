#include "report/cli.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "api/client.h"
#include "core/text.h"
#include "report/report.h"
#include "store/store.h"

namespace gpuslice::report {
namespace {

Micros WallNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Encode(std::string_view v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

std::string ReportTarget(const ReportFlags& f) {
  std::string t = "/v1/report?by=" + Encode(f.by);
  if (!f.since.empty()) t += "&since=" + Encode(f.since);
  if (!f.from.empty()) t += "&from=" + Encode(f.from);
  if (!f.to.empty()) t += "&to=" + Encode(f.to);
  return t;
}

Status RunReport(const api::ClientFlags& c, const ReportFlags& f) {
  // Checked here first, so a bad flag is named as the user typed it, daemon or not.
  const Micros now = WallNow();
  GPUSLICE_ASSIGN_OR_RETURN(GroupBy by, ParseGroupBy(f.by));
  GPUSLICE_ASSIGN_OR_RETURN(Period period, ParsePeriod(f.since, f.from, f.to, now));
  if (f.csv && c.json) return InvalidArgument("--csv and --json: give one of them");
  nlohmann::json doc;
  if (!f.state_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(f.state_dir) / "gpuslice.db", ec)) {
      return NotFound(fmt::format("--state-dir '{}': no gpuslice.db there", EscapeInvalidUtf8(f.state_dir)));
    }
    GPUSLICE_ASSIGN_OR_RETURN(auto store, store::OpenSqliteStore(f.state_dir, store::Sync::kProcess));
    ReportOptions o;
    o.period = period;
    o.by = by;
    o.now = now;
    GPUSLICE_ASSIGN_OR_RETURN(doc, BuildReport(*store, o));
  } else {
    std::string token;
    if (!c.token_file.empty()) {
      std::ifstream in(c.token_file);
      if (!in) return InvalidArgument(fmt::format("--token-file '{}': cannot read", EscapeInvalidUtf8(c.token_file)));
      std::getline(in, token);
    }
    api::ApiClient client(c.socket.empty() ? api::DefaultSocket() : c.socket, token);
    GPUSLICE_ASSIGN_OR_RETURN(doc, client.Get(ReportTarget(f)));
  }
  if (!f.out.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(auto files, WriteSvgs(doc, f.out));
    for (const auto& p : files) std::fprintf(stderr, "wrote %s\n", ForTerminal(p).c_str());
  }
  std::string text = c.json ? doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                     : f.csv ? FormatCsv(doc)
                             : FormatTable(doc);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return Status::Ok();
}

}  // namespace gpuslice::report
