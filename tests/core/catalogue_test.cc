// Catalogue facts and MIG layout rules, checked against shared/reference/devices.md §1
// (placement tables §1.2, per-profile figures §1.3, test vectors and counts §1.6).

#include "core/catalogue.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice {
namespace {

using ::testing::HasSubstr;

const DeviceModel& Model(std::string_view name) {
  auto m = FindModel(name);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return **m;
}

// Layouts in the tests use A100-40GB names ("3g.20gb@4"); every 8-memory-slice GPU shares the
// profile IDs and placements, so vectors are translated by ID to the other boards.
MigLayout A100Layout(std::string_view text) {
  auto l = ParseLayout(Model("A100-40GB"), text);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.value_or({});
}

std::vector<const DeviceModel*> EightSliceModels() {
  std::vector<const DeviceModel*> out;
  for (const DeviceModel& m : AllModels())
    if (m.mig_memory_slices == 8) out.push_back(&m);
  return out;
}

// ---------------------------------------------------------------- lookup

TEST(FindModel, CanonicalNamesAndNvmlAliasesCaseInsensitive) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"A100-40GB", "A100-40GB"},
      {"a100-40gb", "A100-40GB"},
      {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A100-PCIE-40GB", "A100-40GB"},
      {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},
      {"NVIDIA A30", "A30-24GB"},
      {"nvidia h100 80gb hbm3", "H100-80GB"},
      {"NVIDIA H100 NVL", "H100-NVL-94GB"},
      {"NVIDIA H200", "H200-141GB"},
      {"NVIDIA H200 NVL", "H200-141GB"},
      {"NVIDIA B200", "B200"},
      {"  NVIDIA B200 ", "B200"},
  };
  for (const auto& [query, want] : cases) {
    auto m = FindModel(query);
    ASSERT_TRUE(m.ok()) << query << ": " << m.status().ToString();
    EXPECT_EQ((*m)->name, want) << query;
  }
}

TEST(FindModel, NotFoundNamesTheValueAndListsKnownModels) {
  auto m = FindModel("Tesla V100");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("'Tesla V100'"));
  for (const DeviceModel& known : AllModels())
    EXPECT_THAT(m.status().message(), HasSubstr(known.name));
  EXPECT_FALSE(FindModel("").ok());
}

TEST(Catalogue, HasEveryModelTheIssueNames) {
  std::vector<std::string> names;
  for (const DeviceModel& m : AllModels()) names.push_back(m.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("A100-40GB", "A100-80GB", "A30-24GB",
                                                     "H100-80GB", "H100-NVL-94GB", "H200-141GB",
                                                     "B200"));
}

// ---------------------------------------------------------------- static facts

struct ModelFacts {
  std::string name;
  Bytes memory;
  int sms;
  int mps_clients;
  int memory_slices;
  int compute_slices;
  int max_instances;
};

TEST(Catalogue, WholeDeviceFacts) {
  const std::vector<ModelFacts> facts = {
      {"A100-40GB", 40960 * kMiB, 108, 48, 8, 7, 7},
      {"A100-80GB", 81920 * kMiB, 108, 48, 8, 7, 7},
      {"A30-24GB", 24576 * kMiB, 56, 48, 4, 4, 4},
      {"H100-80GB", 81559 * kMiB, 132, 48, 8, 7, 7},
      {"H100-NVL-94GB", 95830 * kMiB, 132, 48, 8, 7, 7},
      {"H200-141GB", 143771 * kMiB, 132, 48, 8, 7, 7},
      {"B200", 183359 * kMiB, 148, 48, 8, 7, 7},
  };
  for (const ModelFacts& f : facts) {
    const DeviceModel& m = Model(f.name);
    EXPECT_EQ(m.memory, f.memory) << f.name;
    EXPECT_EQ(m.sm_count, f.sms) << f.name;
    EXPECT_EQ(m.mps_max_clients, f.mps_clients) << f.name;
    EXPECT_EQ(m.mig_memory_slices, f.memory_slices) << f.name;
    EXPECT_EQ(m.mig_compute_slices, f.compute_slices) << f.name;
    EXPECT_EQ(m.mig_max_instances, f.max_instances) << f.name;
    EXPECT_TRUE(m.supports_mig());
  }
}

// One row of `nvidia-smi mig -lgipp` plus -lgip: id, name, slices, starts, max.
struct ProfileRow {
  int id;
  std::string name;
  int compute;
  int memory_slices;
  bool me;
  int max;
  std::vector<int> starts;
  int sms;
};

void ExpectProfiles(const std::string& model, const std::vector<ProfileRow>& rows) {
  const DeviceModel& m = Model(model);
  ASSERT_EQ(m.mig_profiles.size(), rows.size()) << model;
  for (const ProfileRow& r : rows) {
    const MigProfile* p = m.FindProfileById(r.id);
    ASSERT_NE(p, nullptr) << model << " id " << r.id;
    EXPECT_EQ(p->name, r.name) << model;
    EXPECT_EQ(p->compute_slices, r.compute) << model << " " << r.name;
    EXPECT_EQ(p->memory_slices, r.memory_slices) << model << " " << r.name;
    EXPECT_EQ(p->media_extensions, r.me) << model << " " << r.name;
    EXPECT_EQ(p->max_instances, r.max) << model << " " << r.name;
    EXPECT_EQ(p->placement_starts, r.starts) << model << " " << r.name;
    EXPECT_EQ(p->sm_count, r.sms) << model << " " << r.name;
    EXPECT_EQ(m.FindProfile(r.name), p) << model << " " << r.name;
  }
}

TEST(Catalogue, A100_40GB_ProfileTable) {
  ExpectProfiles("A100-40GB", {{19, "1g.5gb", 1, 1, false, 7, {0, 1, 2, 3, 4, 5, 6}, 14},
                               {20, "1g.5gb+me", 1, 1, true, 1, {0, 1, 2, 3, 4, 5, 6}, 14},
                               {15, "1g.10gb", 1, 2, false, 4, {0, 2, 4, 6}, 14},
                               {14, "2g.10gb", 2, 2, false, 3, {0, 2, 4}, 28},
                               {9, "3g.20gb", 3, 4, false, 2, {0, 4}, 42},
                               {5, "4g.20gb", 4, 4, false, 1, {0}, 56},
                               {0, "7g.40gb", 7, 8, false, 1, {0}, 98}});
  // 4.75 GiB as -lgip prints it, never rounded up.
  EXPECT_EQ(Model("A100-40GB").FindProfileById(19)->memory, 4864 * kMiB);
}

TEST(Catalogue, H100_80GB_ProfileTableHasIrregularSmCounts) {
  ExpectProfiles("H100-80GB", {{19, "1g.10gb", 1, 1, false, 7, {0, 1, 2, 3, 4, 5, 6}, 16},
                               {20, "1g.10gb+me", 1, 1, true, 1, {0, 1, 2, 3, 4, 5, 6}, 16},
                               {15, "1g.20gb", 1, 2, false, 4, {0, 2, 4, 6}, 26},
                               {14, "2g.20gb", 2, 2, false, 3, {0, 2, 4}, 32},
                               {9, "3g.40gb", 3, 4, false, 2, {0, 4}, 60},
                               {5, "4g.40gb", 4, 4, false, 1, {0}, 64},
                               {0, "7g.80gb", 7, 8, false, 1, {0}, 132}});
}

TEST(Catalogue, A30_ProfileTableUsesItsOwnIds) {
  ExpectProfiles("A30-24GB", {{14, "1g.6gb", 1, 1, false, 4, {0, 1, 2, 3}, 14},
                              {21, "1g.6gb+me", 1, 1, true, 1, {0, 1, 2, 3}, 14},
                              {5, "2g.12gb", 2, 2, false, 2, {0, 2}, 28},
                              {6, "2g.12gb+me", 2, 2, true, 1, {0, 2}, 28},
                              {0, "4g.24gb", 4, 4, false, 1, {0}, 56}});
}

TEST(Catalogue, ProfileNamesPerEightSliceBoard) {
  // Names drift between boards; IDs do not (devices.md §1.2).
  const std::map<std::string, std::vector<std::string>> names = {
      {"A100-80GB", {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-NVL-94GB", {"1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}},
      {"H200-141GB", {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
      {"B200", {"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
  };
  const int ids[] = {19, 15, 14, 9, 5, 0};
  for (const auto& [model, want] : names)
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(Model(model).FindProfileById(ids[i])->name, want[i]) << model;
}

TEST(Catalogue, StructuralInvariantsOfEveryModel) {
  for (const DeviceModel& m : AllModels()) {
    std::set<int> ids;
    std::set<std::string> names;
    int me_profiles = 0;
    for (const MigProfile& p : m.mig_profiles) {
      EXPECT_TRUE(ids.insert(p.id).second) << m.name << " duplicate id " << p.id;
      EXPECT_TRUE(names.insert(p.name).second) << m.name << " duplicate name " << p.name;
      EXPECT_TRUE(std::is_sorted(p.placement_starts.begin(), p.placement_starts.end()));
      EXPECT_FALSE(p.placement_starts.empty()) << m.name << " " << p.name;
      for (int s : p.placement_starts) {
        EXPECT_GE(s, 0);
        EXPECT_LE(s + p.memory_slices, m.mig_memory_slices) << m.name << " " << p.name;
        // Memory slices of 7-compute GPUs: 8, so a 1g placement never starts at 7 (§1.6 I3).
        EXPECT_LT(s, m.mig_compute_slices) << m.name << " " << p.name;
      }
      EXPECT_GT(p.memory, 0);
      EXPECT_LT(p.memory, m.memory) << m.name << " " << p.name;
      EXPECT_LE(p.sm_count, m.sm_count) << m.name << " " << p.name;
      EXPECT_GE(p.nvml_index, 0) << m.name << " " << p.name;
      if (p.media_extensions) {
        ++me_profiles;
        EXPECT_EQ(p.max_instances, 1) << m.name << " " << p.name;
      }
      // A profile alone at each legal start is a legal layout.
      for (int s : p.placement_starts)
        EXPECT_TRUE(ValidateLayout(m, {{p.id, s}}).ok()) << m.name << " " << p.name << "@" << s;
    }
    EXPECT_GE(me_profiles, 1) << m.name;
  }
}

// ---------------------------------------------------------------- smallest profile

TEST(SmallestProfileFor, PicksFewestMemorySlicesThenComputeAndNeverPlusMe) {
  struct Case {
    std::string model;
    Bytes need;
    int want_id;  // -1: nothing fits
  };
  const std::vector<Case> cases = {
      {"A100-40GB", 0, 19},
      {"A100-40GB", 4 * kGiB, 19},
      {"A100-40GB", 4864 * kMiB, 19},     // exactly 1g.5gb's 4.75 GiB
      {"A100-40GB", 4864 * kMiB + 1, 15},  // one byte more: 1g.10gb (2 memory slices, 1 compute)
      {"A100-40GB", 9 * kGiB, 15},
      {"A100-40GB", 10 * kGiB, 9},  // 1g.10gb and 2g.10gb report 9.62 GiB
      {"A100-40GB", 20 * kGiB, 0},
      {"A100-40GB", 40 * kGiB, -1},
      {"H100-80GB", 9 * kGiB, 19},
      {"H100-80GB", 10 * kGiB, 15},  // 1g.10gb is 9.75 GiB usable
      {"H200-141GB", 16 * kGiB, 19},
      {"A30-24GB", 5 * kGiB, 14},
      {"A30-24GB", 6 * kGiB, 5},
      {"A30-24GB", 24 * kGiB, -1},
  };
  for (const Case& c : cases) {
    const MigProfile* p = Model(c.model).SmallestProfileFor(c.need);
    if (c.want_id < 0) {
      EXPECT_EQ(p, nullptr) << c.model << " " << c.need;
    } else {
      ASSERT_NE(p, nullptr) << c.model << " " << c.need;
      EXPECT_EQ(p->id, c.want_id) << c.model << " " << c.need;
      EXPECT_FALSE(p->media_extensions);
    }
  }
}

// ---------------------------------------------------------------- §1.6 vectors

struct LayoutCase {
  std::string id;
  std::string layout;             // A100-40GB names
  std::string error_substr;       // empty: valid
};

const std::vector<LayoutCase>& VectorCases() {
  static const std::vector<LayoutCase> cases = {
      {"V1", "3g.20gb@0 3g.20gb@4", ""},
      {"V2", "4g.20gb@0 3g.20gb@4", ""},  // R510+; gpuslice assumes a current driver
      {"V3", "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4", ""},
      {"V4", "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@6 2g.10gb@4", ""},
      {"V5", "4g.20gb@0 2g.10gb@4 1g.5gb@6", ""},
      {"V6", "1g.10gb@0 1g.10gb@2 1g.10gb@4 1g.10gb@6", ""},
      {"V7", "7g.40gb@0", ""},
      {"I1", "3g.20gb@2", "profile 9 (3g.20gb) at start 2: start 2 is not a legal placement"},
      {"I2", "2g.10gb@6", "profile 14 (2g.10gb) at start 6: start 6 is not a legal placement"},
      {"I3", "1g.5gb@7", "profile 19 (1g.5gb) at start 7: start 7 is not a legal placement"},
      {"I4", "4g.20gb@4", "profile 5 (4g.20gb) at start 4: start 4 is not a legal placement"},
      {"I5a", "1g.5gb@0 1g.5gb@5 3g.20gb@0", "overlaps"},
      {"I5b", "1g.5gb@0 1g.5gb@5 3g.20gb@4", "overlaps"},
      {"I6", "1g.5gb+me@0 1g.5gb+me@1", "second +me instance"},
      {"I7a", "7g.40gb@0 1g.5gb@3", "overlaps"},
      {"I7b", "7g.40gb@0 7g.40gb@0", "overlaps"},
      {"overlap-names-both", "2g.10gb@2 1g.5gb@3",
       "profile 19 (1g.5gb) at start 3 overlaps profile 14 (2g.10gb) at start 2 on memory slice 3"},
  };
  return cases;
}

TEST(ValidateLayout, ReferenceVectorsOnEveryEightSliceGpu) {
  for (const DeviceModel* m : EightSliceModels()) {
    for (const LayoutCase& c : VectorCases()) {
      const Status st = ValidateLayout(*m, A100Layout(c.layout));
      if (c.error_substr.empty()) {
        EXPECT_TRUE(st.ok()) << m->name << " " << c.id << ": " << st.ToString();
      } else {
        ASSERT_FALSE(st.ok()) << m->name << " " << c.id;
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_THAT(st.message(), HasSubstr(m->name));
        // Names come from the board's own table; compare ID-bearing text on A100-40GB only.
        if (m->name == "A100-40GB") {
          EXPECT_THAT(st.message(), HasSubstr(c.error_substr)) << c.id;
        }
      }
    }
  }
}

TEST(ValidateLayout, I5_FreeComputeIsFragmented) {
  // Five compute slices are free, yet neither 3g start is usable.
  const DeviceModel& m = Model("A100-40GB");
  const MigLayout base = A100Layout("1g.5gb@0 1g.5gb@5");
  ASSERT_TRUE(ValidateLayout(m, base).ok());
  EXPECT_EQ(RemainingCapacity(m, base, 9), 0);
  EXPECT_EQ(RemainingCapacity(m, base, 19), 5);
}

TEST(ValidateLayout, OtherRules) {
  const DeviceModel& a100 = Model("A100-40GB");
  const DeviceModel& a30 = Model("A30-24GB");
  struct Case {
    const DeviceModel* model;
    MigLayout layout;
    std::string error_substr;
  };
  const std::vector<Case> cases = {
      {&a100, {{42, 0}}, "instance 0: unknown profile id 42"},
      {&a100, {{19, -1}}, "start -1 is not a legal placement"},
      {&a100, {{19, 0}, {19, 0}}, "overlaps"},
      // A30's two +me profiles share one JPEG/OFA: one +me instance in all.
      {&a30, {{21, 0}, {6, 2}}, "second +me instance"},
      {&a30, {{21, 0}, {14, 1}, {5, 2}}, ""},
      {&a30, {{0, 0}, {14, 0}}, "overlaps"},
      {&a30, {{5, 0}, {5, 2}}, ""},
      {&a30, {{5, 1}}, "profile 5 (2g.12gb) at start 1: start 1 is not a legal placement"},
      {&a30, {{19, 0}}, "unknown profile id 19"},  // A100's 1g ID is not an A30 profile
  };
  for (const Case& c : cases) {
    const Status st = ValidateLayout(*c.model, c.layout);
    if (c.error_substr.empty()) {
      EXPECT_TRUE(st.ok()) << FormatLayout(*c.model, c.layout) << ": " << st.ToString();
    } else {
      EXPECT_THAT(st.message(), HasSubstr(c.error_substr)) << FormatLayout(*c.model, c.layout);
    }
  }
}

TEST(RemainingCapacity, ReferenceVectors) {
  const DeviceModel& a100 = Model("A100-40GB");
  // id -> expected remaining, after 3g@0 and after 3g@4 (devices.md §1.6).
  const std::vector<std::tuple<int, int, int>> rows = {
      {19, 3, 4}, {15, 2, 2}, {14, 1, 2}, {9, 1, 1}, {5, 0, 1}, {0, 0, 0}};
  for (const auto& [id, after0, after4] : rows) {
    EXPECT_EQ(RemainingCapacity(a100, {{9, 0}}, id), after0) << "3g@0, profile " << id;
    EXPECT_EQ(RemainingCapacity(a100, {{9, 4}}, id), after4) << "3g@4, profile " << id;
  }
  const DeviceModel& h100 = Model("H100-80GB");
  EXPECT_EQ(RemainingCapacity(h100, {}, 19), 7);
  EXPECT_EQ(RemainingCapacity(h100, {{9, 0}}, 19), 3);  // 7/7 -> 3/7 after one 3g.40gb
  EXPECT_EQ(RemainingCapacity(h100, {{20, 0}}, 20), 0);
  EXPECT_EQ(RemainingCapacity(h100, {}, 12345), 0);
}

// ---------------------------------------------------------------- enumeration

using Multiset = std::vector<int>;  // sorted profile ids

Multiset ProfilesOf(const MigLayout& l) {
  Multiset ms;
  for (const MigPlacement& p : l) ms.push_back(p.profile_id);
  std::sort(ms.begin(), ms.end());
  return ms;
}

bool ProperSubMultiset(const Multiset& a, const Multiset& b) {
  return a.size() < b.size() && std::includes(b.begin(), b.end(), a.begin(), a.end());
}

struct Counts {
  size_t placed_nonempty = 0;
  size_t multisets_nonempty = 0;
  size_t maximal_by_layout = 0;    // no further non-+me instance fits in some placed layout
  size_t maximal_by_multiset = 0;  // no larger non-+me multiset is feasible at all
  std::set<Multiset> maximal;
};

Counts Count(const DeviceModel& m) {
  const std::vector<MigLayout> all = EnumerateLayouts(m);
  Counts c;
  std::set<Multiset> multisets, no_me, maximal_layout;
  std::vector<int> plain_ids;
  for (const MigProfile& p : m.mig_profiles)
    if (!p.media_extensions) plain_ids.push_back(p.id);
  const auto has_me = [&](const MigLayout& l) {
    return std::any_of(l.begin(), l.end(), [&](const MigPlacement& p) {
      return m.FindProfileById(p.profile_id)->media_extensions;
    });
  };
  for (const MigLayout& l : all) {
    if (!l.empty()) ++c.placed_nonempty;
    if (!l.empty()) multisets.insert(ProfilesOf(l));
    if (has_me(l)) continue;
    no_me.insert(ProfilesOf(l));
    const bool full = std::all_of(plain_ids.begin(), plain_ids.end(),
                                  [&](int id) { return RemainingCapacity(m, l, id) == 0; });
    if (full) maximal_layout.insert(ProfilesOf(l));
  }
  c.multisets_nonempty = multisets.size();
  c.maximal_by_layout = maximal_layout.size();
  for (const Multiset& a : no_me) {
    const bool dominated = std::any_of(no_me.begin(), no_me.end(),
                                       [&](const Multiset& b) { return ProperSubMultiset(a, b); });
    if (!dominated) ++c.maximal_by_multiset;
  }
  c.maximal = maximal_layout;
  return c;
}

TEST(EnumerateLayouts, CountsMatchReferenceOnEveryEightSliceGpu) {
  // devices.md §1.6: 2,318 placed layouts / 127 non-empty multisets (with +me) / 38 maximal
  // multisets without +me when "maximal" means nothing more can be placed in the layout / 28
  // when it means no larger multiset is feasible. The 2,318 excludes the empty layout, which
  // EnumerateLayouts also returns (2,319 in all).
  for (const DeviceModel* m : EightSliceModels()) {
    const Counts c = Count(*m);
    EXPECT_EQ(c.placed_nonempty, 2318u) << m->name;
    EXPECT_EQ(c.multisets_nonempty, 127u) << m->name;
    EXPECT_EQ(c.maximal_by_layout, 38u) << m->name;
    EXPECT_EQ(c.maximal_by_multiset, 28u) << m->name;
  }
}

TEST(EnumerateLayouts, CountsMatchReferenceOnA30) {
  const DeviceModel& m = Model("A30-24GB");
  const Counts c = Count(m);
  EXPECT_EQ(c.placed_nonempty, 75u);
  EXPECT_EQ(c.multisets_nonempty, 19u);
  EXPECT_EQ(c.maximal_by_layout, 4u);
  EXPECT_EQ(c.maximal_by_multiset, 4u);
  // 4x1g.6gb, 2x1g.6gb + 2g.12gb, 2x2g.12gb, 4g.24gb.
  EXPECT_EQ(c.maximal, (std::set<Multiset>{{14, 14, 14, 14}, {5, 14, 14}, {5, 5}, {0}}));
}

TEST(EnumerateLayouts, EveryLayoutIsLegalCanonicalAndUnique) {
  for (const DeviceModel& m : AllModels()) {
    const std::vector<MigLayout> all = EnumerateLayouts(m);
    ASSERT_FALSE(all.empty());
    EXPECT_TRUE(all.front().empty()) << m.name << ": the empty layout comes first";
    std::set<std::vector<std::pair<int, int>>> seen;
    for (const MigLayout& l : all) {
      EXPECT_TRUE(ValidateLayout(m, l).ok()) << FormatLayout(m, l);
      MigLayout sorted = l;
      SortCanonical(sorted);
      EXPECT_EQ(sorted, l) << FormatLayout(m, l);
      std::vector<std::pair<int, int>> key;
      for (const MigPlacement& p : l) key.emplace_back(p.start, p.profile_id);
      EXPECT_TRUE(seen.insert(key).second) << "duplicate " << FormatLayout(m, l);
    }
    // Canonical order of the list itself: lexicographic by (start, profile id).
    for (size_t i = 1; i < all.size(); ++i) {
      std::vector<std::pair<int, int>> a, b;
      for (const MigPlacement& p : all[i - 1]) a.emplace_back(p.start, p.profile_id);
      for (const MigPlacement& p : all[i]) b.emplace_back(p.start, p.profile_id);
      EXPECT_LT(a, b) << m.name << " at " << i;
    }
  }
}

// LayoutIsLegal() is ValidateLayout().ok() without the message: on every legal layout of every
// model, and on each of them with one more instance of any profile (or an unknown one) at any
// start, legal or not (overlaps, a second +me, too many instances or compute slices).
TEST(LayoutIsLegal, AgreesWithValidateLayout) {
  for (const DeviceModel& m : AllModels()) {
    EXPECT_EQ(LayoutIsLegal(m, {}), ValidateLayout(m, {}).ok()) << m.name;
    if (!m.supports_mig()) {
      EXPECT_FALSE(LayoutIsLegal(m, {{0, 0}})) << m.name;
      continue;
    }
    std::vector<int> ids{-1};
    for (const MigProfile& p : m.mig_profiles) ids.push_back(p.id);
    int checked = 0;
    for (const MigLayout& l : EnumerateLayouts(m)) {
      EXPECT_TRUE(LayoutIsLegal(m, l)) << FormatLayout(m, l);
      for (int id : ids) {
        for (int start = 0; start < m.mig_memory_slices; ++start) {
          MigLayout more = l;
          more.push_back({id, start});
          ASSERT_EQ(LayoutIsLegal(m, more), ValidateLayout(m, more).ok()) << m.name << " " << FormatLayout(m, l)
                                                                         << " + profile " << id << "@" << start;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 0) << m.name;
  }
}

TEST(EnumerateLayouts, ContainsEveryValidReferenceVector) {
  const DeviceModel& m = Model("A100-40GB");
  const std::vector<MigLayout> all = EnumerateLayouts(m);
  for (const LayoutCase& c : VectorCases()) {
    if (c.id.empty() || c.id[0] != 'V') continue;
    MigLayout l = A100Layout(c.layout);
    SortCanonical(l);
    EXPECT_NE(std::find(all.begin(), all.end(), l), all.end()) << c.id;
  }
}

// ---------------------------------------------------------------- text form

TEST(ParseLayout, RoundTripsAndRejectsJunk) {
  const DeviceModel& m = Model("H100-80GB");
  auto l = ParseLayout(m, "3g.40gb@4, 1G.10GB@0 15@2");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, (MigLayout{{9, 4}, {19, 0}, {15, 2}}));
  EXPECT_EQ(FormatLayout(m, *l), "3g.40gb@4 1g.10gb@0 1g.20gb@2");
  EXPECT_TRUE(ParseLayout(m, "").ok());
  EXPECT_TRUE(ParseLayout(m, "")->empty());
  for (const char* bad : {"3g.40gb", "9g.1gb@0", "3g.40gb@x", "3g.40gb@", "@0"}) {
    auto r = ParseLayout(m, bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseLayout(m, "9g.1gb@0").status().message(), HasSubstr("'9g.1gb'"));
}

}  // namespace
}  // namespace gpuslice
