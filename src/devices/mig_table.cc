// MigTableDifferences (backend.h): the catalogue's MIG profiles of a model against what a driver
// reports. The daemon logs each difference and then uses the driver's table
// (core/catalogue.h UseDriverMigProfiles): the catalogue's placements are copied from other
// boards and marked assumed where no driver was ever read (H200), the driver's are the truth.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "devices/backend.h"

namespace gpuslice::devices {
namespace {

std::string Name(const MigProfile& p) { return fmt::format("profile {} ({})", p.id, p.name); }

const MigProfile* ById(const std::vector<MigProfile>& ps, int id) {
  for (const MigProfile& p : ps)
    if (p.id == id) return &p;
  return nullptr;
}

}  // namespace

std::vector<std::string> MigTableDifferences(const DeviceModel& model, const std::vector<MigProfile>& driver) {
  std::vector<std::string> out;
  for (const MigProfile& c : model.mig_profiles) {
    if (ById(driver, c.id) == nullptr) out.push_back(fmt::format("{}: in the catalogue, not offered by the driver", Name(c)));
  }
  for (const MigProfile& d : driver) {
    const MigProfile* c = ById(model.mig_profiles, d.id);
    if (c == nullptr) {
      out.push_back(fmt::format("{}: offered by the driver, not in the catalogue", Name(d)));
      continue;
    }
    std::vector<int> cs = c->placement_starts, ds = d.placement_starts;
    std::sort(cs.begin(), cs.end());
    std::sort(ds.begin(), ds.end());
    if (cs != ds) {
      out.push_back(fmt::format("{}: placement starts {} in the catalogue, {} from the driver", Name(*c),
                                fmt::join(cs, ","), fmt::join(ds, ",")));
    }
    if (c->memory_slices != d.memory_slices)
      out.push_back(fmt::format("{}: {} memory slices in the catalogue, {} from the driver", Name(*c),
                                c->memory_slices, d.memory_slices));
    if (c->compute_slices != d.compute_slices)
      out.push_back(fmt::format("{}: {} compute slices in the catalogue, {} from the driver", Name(*c),
                                c->compute_slices, d.compute_slices));
    if (c->max_instances != d.max_instances)
      out.push_back(fmt::format("{}: at most {} instances in the catalogue, {} from the driver", Name(*c),
                                c->max_instances, d.max_instances));
    // Drivers report memory in whole MiB and round differently; 1% is past any rounding.
    if (std::llabs(c->memory - d.memory) * 100 > std::max(c->memory, d.memory))
      out.push_back(fmt::format("{}: {} in the catalogue, {} from the driver", Name(*c), FormatBytes(c->memory),
                                FormatBytes(d.memory)));
  }
  return out;
}

}  // namespace gpuslice::devices
