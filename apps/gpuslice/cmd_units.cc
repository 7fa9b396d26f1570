// `gpuslice units`: reads a request's amounts by the daemon's own grammar (core/units.h) and
// prints them as integers, or names the field and the value that is wrong. For programs that
// must accept exactly what `gpuslice submit` and the daemon accept (the JupyterHub spawner
// checks its users' options with it) instead of writing a second parser.
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/text.h"
#include "core/units.h"
#include "registry.h"

namespace {

using gpuslice::Status;

Status Units(const std::string* fraction, const std::string* mem, const std::string* time) {
  nlohmann::json out = nlohmann::json::object();
  if (fraction != nullptr) {
    // The daemon's field 'fraction' (daemon/requests.cc): a share of one device.
    auto m = gpuslice::ParseGpuAmount(*fraction);
    if (!m.ok()) {
      return gpuslice::InvalidArgument(fmt::format("fraction '{}': {}", *fraction, m.status().message()));
    }
    if (*m > gpuslice::kOneGpu) {
      return gpuslice::InvalidArgument(fmt::format("fraction '{}' is more than one GPU", *fraction));
    }
    out["fraction_milli"] = *m;
  }
  if (mem != nullptr) {
    auto b = gpuslice::ParseJobMemory(*mem);
    if (!b.ok()) return gpuslice::InvalidArgument(fmt::format("mem: {}", b.status().message()));
    out["mem_bytes"] = *b;
  }
  if (time != nullptr) {
    auto d = gpuslice::ParseTimeLimit(*time);
    if (!d.ok()) return gpuslice::InvalidArgument(fmt::format("time: {}", d.status().message()));
    out["time_us"] = *d;
  }
  std::cout << out.dump() << "\n";
  return Status::Ok();
}

}  // namespace

GPUSLICE_COMMAND(units) {
  auto* sub = app.add_subcommand(
      "units", "Read a request's amounts as the daemon does and print them as integers (JSON)");
  struct Flags {
    std::string fraction, mem, time;
  };
  auto f = std::make_shared<Flags>();
  auto* fo = sub->add_option("--fraction", f->fraction, "share of one GPU: 0.25, 250m, 1");
  auto* mo = sub->add_option("--mem", f->mem, "memory cap: 10GiB, 512MiB, 1.5GiB, 80GB");
  auto* to = sub->add_option("--time", f->time, "time limit: 2h, 90m, 1h30m, 500ms, 90 (seconds)");
  sub->footer("Prints {\"fraction_milli\": ..., \"mem_bytes\": ..., \"time_us\": ...} for the options given;\n"
              "a value the daemon would refuse exits 2 naming the option and the value.\n"
              "Example:\n  gpuslice units --fraction 0.25 --mem 10GiB --time 2h");
  sub->callback([f, fo, mo, to, exit_code] {
    const Status st = Units(fo->count() ? &f->fraction : nullptr, mo->count() ? &f->mem : nullptr,
                            to->count() ? &f->time : nullptr);
    if (!st.ok()) {
      // The message alone (no status code): it starts with the option it names.
      std::cerr << "error: " << gpuslice::ForTerminal(st.message()) << "\n";
      *exit_code = gpuslice::cli::kExitUsage;
    }
  });
}
