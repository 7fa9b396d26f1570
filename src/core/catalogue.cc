#include "core/catalogue.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <tuple>

#include <fmt/format.h>

namespace gpuslice {
namespace {

// Profile memory as `nvidia-smi mig -lgip` prints it (GiB with two decimals), in hundredths of
// a GiB. Converted down to whole MiB so we never promise more than the driver reported.
constexpr Bytes ReportedGiB(std::int64_t hundredths) { return hundredths * 1024 / 100 * kMiB; }

// Per-board figures for the seven profiles shared by every 7-compute / 8-memory-slice part,
// in the order of kEightSliceShapes below.
struct EightSliceFigures {
  const char* names[7];
  std::int64_t gib_hundredths[7];
  int sms[7];
};

struct Shape {
  int id;
  int nvml_index;
  int compute;
  int memory;
  bool me;
  int max;
  std::vector<int> starts;
};

// Placement structure from `nvidia-smi mig -lgipp` (devices.md §1.2): identical on A100, H100,
// H100 NVL; assumed identical on H200/B200 ([D]). Where a driver is present the daemon reads the
// driver's table at start, logs where it differs and uses it instead (UseDriverMigProfiles), so
// an assumption here never outlives the first start on such a GPU. Order: fewest memory slices,
// then compute, +me after its plain twin.
const Shape kEightSliceShapes[7] = {
    {19, 0x0, 1, 1, false, 7, {0, 1, 2, 3, 4, 5, 6}},
    {20, 0x7, 1, 1, true, 1, {0, 1, 2, 3, 4, 5, 6}},
    {15, 0x9, 1, 2, false, 4, {0, 2, 4, 6}},
    {14, 0x1, 2, 2, false, 3, {0, 2, 4}},
    {9, 0x2, 3, 4, false, 2, {0, 4}},
    {5, 0x3, 4, 4, false, 1, {0}},
    {0, 0x4, 7, 8, false, 1, {0}},
};

MigProfile MakeProfile(const Shape& s, const char* name, std::int64_t gib_hundredths, int sms) {
  MigProfile p;
  p.id = s.id;
  p.name = name;
  p.compute_slices = s.compute;
  p.memory_slices = s.memory;
  p.memory = ReportedGiB(gib_hundredths);
  p.sm_count = sms;
  p.media_extensions = s.me;
  p.max_instances = s.max;
  p.placement_starts = s.starts;
  p.nvml_index = s.nvml_index;
  return p;
}

std::vector<MigProfile> EightSliceProfiles(const EightSliceFigures& f) {
  std::vector<MigProfile> out;
  for (int i = 0; i < 7; ++i)
    out.push_back(MakeProfile(kEightSliceShapes[i], f.names[i], f.gib_hundredths[i], f.sms[i]));
  return out;
}

// Driver-reserved memory and one context, per generation (see DeviceModel): Ampere, Hopper,
// Blackwell. Driver reserves are leads from public reports of nvidia-smi totals against CUDA's.
// Contexts: measured on an H200 (132 SMs, driver 580.159, CUDA 13.0, docs/gpu-check.md) a bare
// context takes 518 MiB and a PyTorch process about 610 MiB beyond its tensors; Hopper books 768
// MiB (the PyTorch figure and a quarter), the others are that scaled by SM count and rounded up:
// estimates until a check runs on one.
struct Reserves {
  Bytes driver;
  Bytes context;
};
constexpr Reserves kAmpere{640 * kMiB, 640 * kMiB};
constexpr Reserves kHopper{768 * kMiB, 768 * kMiB};
constexpr Reserves kBlackwell{1024 * kMiB, 896 * kMiB};

DeviceModel EightSliceModel(std::string name, std::vector<std::string> aliases, Bytes memory,
                            int sms, Reserves reserves, const EightSliceFigures& f) {
  DeviceModel m;
  m.name = std::move(name);
  m.aliases = std::move(aliases);
  m.memory = memory;
  m.driver_reserved = reserves.driver;
  m.context_reserve = reserves.context;
  m.sm_count = sms;
  // Volta+ MPS: 48 client contexts per device [C]. 60 with CUDA 13.1+ drivers is only [O].
  m.mps_max_clients = 48;
  m.mig_memory_slices = 8;
  m.mig_compute_slices = 7;
  m.mig_max_instances = 7;
  m.mig_profiles = EightSliceProfiles(f);
  return m;
}

std::vector<DeviceModel> BuildModels() {
  std::vector<DeviceModel> models;
  // Whole-device memory is what nvidia-smi reports as total (MiB); SM counts are full-device.
  models.push_back(EightSliceModel(
      "A100-40GB", {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "A100-SXM4-40GB",
                    "A100-PCIE-40GB", "NVIDIA A100 40GB PCIe"},
      40960 * kMiB, 108, kAmpere,
      {{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
       {475, 475, 962, 962, 1950, 1950, 3925},
       {14, 14, 14, 28, 42, 56, 98}}));
  models.push_back(EightSliceModel(
      "A100-80GB", {"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "A100-SXM4-80GB",
                    "A100-SXM-80GB", "NVIDIA A100-SXM-80GB"},
      81920 * kMiB, 108, kAmpere,
      // Lower of the figures seen across drivers (9.50/9.75, 39.25-39.50, 78.75-79.25).
      {{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
       {950, 950, 1950, 1950, 3925, 3925, 7875},
       {14, 14, 14, 28, 42, 56, 98}}));
  models.push_back(EightSliceModel(
      "H100-80GB", {"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100", "H100-SXM5-80GB",
                    "NVIDIA H100-SXM5-80GB"},
      81559 * kMiB, 132, kHopper,
      {{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
       {975, 975, 1962, 1962, 3950, 3950, 7925},
       {16, 16, 26, 32, 60, 64, 132}}));
  models.push_back(EightSliceModel(
      "H100-NVL-94GB", {"NVIDIA H100 NVL", "H100 NVL", "H100-NVL"}, 95830 * kMiB, 132, kHopper,
      {{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
       {1075, 1075, 2162, 2162, 4638, 4638, 9312},
       {16, 16, 26, 32, 60, 64, 132}}));
  models.push_back(EightSliceModel(
      "H200-141GB", {"NVIDIA H200", "NVIDIA H200 NVL", "H200", "H200-NVL"}, 143771 * kMiB, 132, kHopper,
      {{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
       {1600, 1600, 3225, 3225, 6950, 6950, 13975},
       {16, 16, 26, 32, 60, 64, 132}}));
  models.push_back(EightSliceModel(
      "B200", {"NVIDIA B200", "B200-180GB"}, 183359 * kMiB, 148, kBlackwell,
      // 1g: the later driver's 20.50 GiB. 3g/4g/7g memory and SM figures were never seen in
      // full (devices.md §6 item 1): derived conservatively from the 2-memory-slice profile.
      {{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
       {2050, 2050, 4425, 4425, 8850, 8850, 17700},
       {18, 18, 30, 36, 54, 72, 126}}));

  // A30: 4 memory slices, 4 compute slices, its own profile IDs (devices.md §1.2, §1.3).
  DeviceModel a30;
  a30.name = "A30-24GB";
  a30.aliases = {"NVIDIA A30", "A30", "A30-24GB"};
  a30.memory = 24576 * kMiB;
  a30.driver_reserved = 512 * kMiB;
  a30.context_reserve = kAmpere.context;
  a30.sm_count = 56;
  a30.mps_max_clients = 48;
  a30.mig_memory_slices = 4;
  a30.mig_compute_slices = 4;
  a30.mig_max_instances = 4;
  a30.mig_profiles = {
      MakeProfile({14, 0x0, 1, 1, false, 4, {0, 1, 2, 3}}, "1g.6gb", 581, 14),
      MakeProfile({21, 0x7, 1, 1, true, 1, {0, 1, 2, 3}}, "1g.6gb+me", 581, 14),
      MakeProfile({5, 0x1, 2, 2, false, 2, {0, 2}}, "2g.12gb", 1169, 28),
      MakeProfile({6, 0x8, 2, 2, true, 1, {0, 2}}, "2g.12gb+me", 1169, 28),
      MakeProfile({0, 0x3, 4, 4, false, 1, {0}}, "4g.24gb", 2344, 56),
  };
  models.push_back(std::move(a30));
  return models;
}

std::vector<DeviceModel>& MutableModels() {
  static std::vector<DeviceModel> models = BuildModels();
  return models;
}
const std::vector<DeviceModel>& Models() { return MutableModels(); }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool CanonicalLess(const MigPlacement& a, const MigPlacement& b) {
  return std::tie(a.start, a.profile_id) < std::tie(b.start, b.profile_id);
}

std::string Describe(const DeviceModel& model, const MigPlacement& p) {
  const MigProfile* prof = model.FindProfileById(p.profile_id);
  return fmt::format("profile {} ({}) at start {}", p.profile_id, prof ? prof->name : "?",
                     p.start);
}

}  // namespace

bool MigProfile::IsLegalStart(int start) const {
  return std::find(placement_starts.begin(), placement_starts.end(), start) !=
         placement_starts.end();
}

const MigProfile* DeviceModel::FindProfileById(int id) const {
  for (const MigProfile& p : mig_profiles)
    if (p.id == id) return &p;
  return nullptr;
}

const MigProfile* DeviceModel::SmallestProfileFor(Bytes need) const {
  const MigProfile* best = nullptr;
  for (const MigProfile& p : mig_profiles) {
    if (p.media_extensions || p.memory < need) continue;
    if (best == nullptr || std::tie(p.memory_slices, p.compute_slices, p.id) <
                               std::tie(best->memory_slices, best->compute_slices, best->id))
      best = &p;
  }
  return best;
}

const MigProfile* DeviceModel::FindProfile(std::string_view name_or_id) const {
  name_or_id = Trim(name_or_id);
  int id = 0;
  auto [ptr, ec] = std::from_chars(name_or_id.data(), name_or_id.data() + name_or_id.size(), id);
  if (ec == std::errc() && ptr == name_or_id.data() + name_or_id.size() && !name_or_id.empty())
    return FindProfileById(id);
  for (const MigProfile& p : mig_profiles)
    if (EqualsIgnoreCase(p.name, name_or_id)) return &p;
  return nullptr;
}

std::span<const DeviceModel> AllModels() { return Models(); }

Status UseDriverMigProfiles(std::string_view model_name, std::vector<MigProfile> profiles) {
  auto found = FindModel(model_name);
  if (!found.ok()) return found.status();
  DeviceModel& m = MutableModels()[static_cast<std::size_t>(*found - Models().data())];
  if (profiles.empty()) return InvalidArgument(fmt::format("{}: the driver reports no MIG profiles", m.name));
  int memory_slices = 0, compute_slices = 0;
  for (const MigProfile& p : profiles) {
    if (p.memory_slices <= 0 || p.compute_slices <= 0 || p.placement_starts.empty() || p.max_instances <= 0)
      return InvalidArgument(fmt::format("{}: MIG profile {} from the driver has no slices, placements or "
                                         "instances", m.name, p.id));
    for (int s : p.placement_starts) {
      if (s < 0 || s + p.memory_slices > 64)
        return InvalidArgument(fmt::format("{}: MIG profile {} from the driver starts at memory slice {}",
                                           m.name, p.id, s));
      memory_slices = std::max(memory_slices, s + p.memory_slices);
    }
    compute_slices = std::max(compute_slices, p.compute_slices);
  }
  std::sort(profiles.begin(), profiles.end(), [](const MigProfile& a, const MigProfile& b) {
    return std::tie(a.memory_slices, a.compute_slices, a.media_extensions, a.id) <
           std::tie(b.memory_slices, b.compute_slices, b.media_extensions, b.id);
  });
  m.mig_profiles = std::move(profiles);
  m.mig_memory_slices = memory_slices;
  m.mig_compute_slices = compute_slices;
  return Status::Ok();
}

Result<const DeviceModel*> FindModel(std::string_view name) {
  std::string_view want = Trim(name);
  for (const DeviceModel& m : Models()) {
    if (EqualsIgnoreCase(m.name, want)) return &m;
    for (const std::string& alias : m.aliases)
      if (EqualsIgnoreCase(alias, want)) return &m;
  }
  std::vector<std::string_view> known;
  for (const DeviceModel& m : Models()) known.push_back(m.name);
  return NotFound(fmt::format("GPU model '{}' is not in the catalogue (known: {})", name,
                              fmt::join(known, ", ")));
}

Status ValidateLayout(const DeviceModel& model, const MigLayout& layout) {
  if (!model.supports_mig()) {
    if (layout.empty()) return Status::Ok();
    return InvalidArgument(fmt::format("MIG layout: {} does not support MIG", model.name));
  }
  const auto fail = [&](std::string what) {
    return InvalidArgument(fmt::format("MIG layout on {}: {}", model.name, what));
  };
  // owner[s] = index in `layout` of the placement covering memory slice s, or -1.
  std::vector<int> owner(model.mig_memory_slices, -1);
  int compute = 0;
  int me_index = -1;
  for (size_t i = 0; i < layout.size(); ++i) {
    const MigPlacement& pl = layout[i];
    const MigProfile* p = model.FindProfileById(pl.profile_id);
    if (p == nullptr) {
      std::vector<int> ids;
      for (const MigProfile& q : model.mig_profiles) ids.push_back(q.id);
      return fail(fmt::format("instance {}: unknown profile id {} (known: {})", i, pl.profile_id,
                              fmt::join(ids, ", ")));
    }
    if (!p->IsLegalStart(pl.start))
      return fail(fmt::format("{}: start {} is not a legal placement (legal starts: {})",
                              Describe(model, pl), pl.start, fmt::join(p->placement_starts, ", ")));
    for (int s = pl.start; s < pl.start + p->memory_slices; ++s) {
      if (owner[s] >= 0)
        return fail(fmt::format("{} overlaps {} on memory slice {}", Describe(model, pl),
                                Describe(model, layout[owner[s]]), s));
      owner[s] = static_cast<int>(i);
    }
    if (p->media_extensions) {
      // +me takes the GPU's only OFA (and JPEG on A100/A30): at most one per GPU, across all
      // +me profiles. With the known engine tables this is the only engine sum that can bind.
      if (me_index >= 0)
        return fail(fmt::format("{} is a second +me instance ({} already holds the GPU's only "
                                "media engines)",
                                Describe(model, pl), Describe(model, layout[me_index])));
      me_index = static_cast<int>(i);
    }
    compute += p->compute_slices;
  }
  for (const MigProfile& p : model.mig_profiles) {
    const auto n = std::count_if(layout.begin(), layout.end(),
                                 [&](const MigPlacement& pl) { return pl.profile_id == p.id; });
    if (n > p.max_instances)
      return fail(fmt::format("profile {} ({}) has {} instances, at most {} allowed", p.id,
                              p.name, n, p.max_instances));
  }
  if (compute > model.mig_compute_slices)
    return fail(fmt::format("instances use {} compute slices, the GPU has {}", compute,
                            model.mig_compute_slices));
  if (static_cast<int>(layout.size()) > model.mig_max_instances)
    return fail(fmt::format("{} GPU instances, at most {} allowed", layout.size(),
                            model.mig_max_instances));
  return Status::Ok();
}

bool LayoutIsLegal(const DeviceModel& model, const MigLayout& layout) {
  if (!model.supports_mig()) return layout.empty();
  // The memory slices taken, one bit each (no catalogued GPU has more than 64).
  if (model.mig_memory_slices > 64) return ValidateLayout(model, layout).ok();
  std::uint64_t taken = 0;
  int compute = 0;
  bool media = false;
  for (const MigPlacement& pl : layout) {
    const MigProfile* p = model.FindProfileById(pl.profile_id);
    if (p == nullptr || !p->IsLegalStart(pl.start)) return false;
    for (int s = pl.start; s < pl.start + p->memory_slices; ++s) {
      const std::uint64_t bit = std::uint64_t{1} << s;
      if (taken & bit) return false;
      taken |= bit;
    }
    if (p->media_extensions) {
      if (media) return false;
      media = true;
    }
    compute += p->compute_slices;
  }
  for (const MigProfile& p : model.mig_profiles) {
    const auto n = std::count_if(layout.begin(), layout.end(),
                                 [&](const MigPlacement& pl) { return pl.profile_id == p.id; });
    if (n > p.max_instances) return false;
  }
  return compute <= model.mig_compute_slices && static_cast<int>(layout.size()) <= model.mig_max_instances;
}

void SortCanonical(MigLayout& layout) { std::sort(layout.begin(), layout.end(), CanonicalLess); }

int RemainingCapacity(const DeviceModel& model, const MigLayout& layout, int profile_id) {
  const MigProfile* p = model.FindProfileById(profile_id);
  if (p == nullptr || !LayoutIsLegal(model, layout)) return 0;
  MigLayout current = layout;
  int added = 0;
  for (int start : p->placement_starts) {
    current.push_back({profile_id, start});
    if (LayoutIsLegal(model, current)) {
      ++added;
    } else {
      current.pop_back();
    }
  }
  return added;
}

int FreeMemorySlices(const DeviceModel& model, const MigLayout& layout) {
  int used = 0;
  for (const MigPlacement& pl : layout)
    if (const MigProfile* p = model.FindProfileById(pl.profile_id)) used += p->memory_slices;
  return model.mig_memory_slices - used;
}

std::vector<MigLayout> EnumerateLayouts(const DeviceModel& model) {
  // Every candidate placement in canonical order; a depth-first include/exclude search that
  // only extends legal layouts visits each legal layout exactly once (legality is closed
  // under taking subsets), and every layout it builds is already sorted canonically.
  MigLayout candidates;
  for (const MigProfile& p : model.mig_profiles)
    for (int s : p.placement_starts) candidates.push_back({p.id, s});
  std::sort(candidates.begin(), candidates.end(), CanonicalLess);

  std::vector<MigLayout> out;
  MigLayout current;
  const auto visit = [&](auto&& self, size_t next) -> void {
    out.push_back(current);
    for (size_t i = next; i < candidates.size(); ++i) {
      current.push_back(candidates[i]);
      if (ValidateLayout(model, current).ok()) self(self, i + 1);
      current.pop_back();
    }
  };
  visit(visit, 0);
  std::sort(out.begin(), out.end(), [](const MigLayout& a, const MigLayout& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), CanonicalLess);
  });
  return out;
}

Result<MigLayout> ParseLayout(const DeviceModel& model, std::string_view text) {
  MigLayout out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find_first_of(", \t\n", pos);
    const std::string_view item = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (item.empty()) continue;
    const size_t at = item.rfind('@');
    if (at == std::string_view::npos)
      return InvalidArgument(fmt::format("MIG layout '{}': item '{}' is not profile@start", text,
                                         item));
    const MigProfile* p = model.FindProfile(item.substr(0, at));
    if (p == nullptr)
      return InvalidArgument(fmt::format("MIG layout '{}': unknown profile '{}' on {}", text,
                                         item.substr(0, at), model.name));
    const std::string_view start_text = item.substr(at + 1);
    int start = 0;
    auto [ptr, ec] = std::from_chars(start_text.data(), start_text.data() + start_text.size(),
                                     start);
    if (ec != std::errc() || ptr != start_text.data() + start_text.size() || start_text.empty())
      return InvalidArgument(fmt::format("MIG layout '{}': start '{}' in '{}' is not a number",
                                         text, start_text, item));
    out.push_back({p->id, start});
  }
  return out;
}

std::string FormatLayout(const DeviceModel& model, const MigLayout& layout) {
  std::vector<std::string> items;
  for (const MigPlacement& pl : layout) {
    const MigProfile* p = model.FindProfileById(pl.profile_id);
    items.push_back(p ? fmt::format("{}@{}", p->name, pl.start)
                      : fmt::format("{}@{}", pl.profile_id, pl.start));
  }
  return fmt::format("{}", fmt::join(items, " "));
}

}  // namespace gpuslice
