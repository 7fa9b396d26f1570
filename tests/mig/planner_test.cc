// MIG layout planner: table-driven cases, invariants on every plan, and an exhaustive oracle
// (the largest number of pending requests any legal layout could serve) to check optimality.

#include "mig/planner.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::mig {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const DeviceModel& Model(std::string_view name) {
  auto m = FindModel(name);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return **m;
}

MigLayout Layout(const DeviceModel& m, std::string_view text) {
  auto l = ParseLayout(m, text);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.value_or({});
}

// Checks every promise of the Plan contract; returns the plan for case-specific assertions.
Plan PlanAndCheck(const PlanInput& in) {
  auto r = PlanLayout(in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  const Plan& plan = *r;
  const DeviceModel& m = *in.model;
  EXPECT_TRUE(ValidateLayout(m, plan.layout).ok()) << FormatLayout(m, plan.layout);
  // in_use kept as is, first, in order.
  EXPECT_GE(plan.layout.size(), in.in_use.size());
  EXPECT_TRUE(std::equal(in.in_use.begin(), in.in_use.end(), plan.layout.begin()));
  EXPECT_EQ(plan.satisfied.size(), plan.assignment.size());
  EXPECT_TRUE(std::is_sorted(plan.satisfied.begin(), plan.satisfied.end()));
  // Every added instance serves exactly one request; each request gets its smallest profile.
  EXPECT_EQ(plan.layout.size() - in.in_use.size(), plan.satisfied.size());
  std::vector<int> slots = plan.assignment;
  std::sort(slots.begin(), slots.end());
  EXPECT_EQ(std::adjacent_find(slots.begin(), slots.end()), slots.end()) << "shared instance";
  for (size_t i = 0; i < plan.satisfied.size(); ++i) {
    const int req = plan.satisfied[i];
    const int slot = plan.assignment[i];
    EXPECT_GE(slot, static_cast<int>(in.in_use.size())) << "request given an in-use instance";
    if (slot < 0 || slot >= static_cast<int>(plan.layout.size())) {
      ADD_FAILURE() << "assignment " << slot << " outside the layout";
      continue;
    }
    const MigProfile* want = m.SmallestProfileFor(in.pending[req]);
    if (want == nullptr) {
      ADD_FAILURE() << "request " << req << " satisfied though no profile holds it";
      continue;
    }
    EXPECT_EQ(plan.layout[slot].profile_id, want->id) << "request " << req;
    EXPECT_GE(m.FindProfileById(plan.layout[slot].profile_id)->memory, in.pending[req]);
  }
  return plan;
}

// Oracle: the most requests any legal layout containing in_use can serve, when each request
// needs exactly its smallest profile.
size_t BestPossible(const PlanInput& in) {
  std::map<int, size_t> demand;
  for (Bytes need : in.pending)
    if (const MigProfile* p = in.model->SmallestProfileFor(need)) ++demand[p->id];
  // Enumerated once per model: the random test asks hundreds of times.
  static std::map<const DeviceModel*, std::vector<MigLayout>> cache;
  auto it = cache.find(in.model);
  if (it == cache.end()) it = cache.emplace(in.model, EnumerateLayouts(*in.model)).first;
  size_t best = 0;
  for (const MigLayout& l : it->second) {
    MigLayout rest = l;
    bool contains = true;
    for (const MigPlacement& u : in.in_use) {
      auto it = std::find(rest.begin(), rest.end(), u);
      if (it == rest.end()) {
        contains = false;
        break;
      }
      rest.erase(it);
    }
    if (!contains) continue;
    std::map<int, size_t> added;
    for (const MigPlacement& p : rest) ++added[p.profile_id];
    const bool fits = std::all_of(added.begin(), added.end(),
                                  [&](const auto& kv) { return kv.second <= demand[kv.first]; });
    if (fits) best = std::max(best, rest.size());
  }
  return best;
}

struct Case {
  std::string name;
  std::string model;
  std::string in_use;
  std::vector<Bytes> pending;
  std::string want_layout;        // FormatLayout of the plan
  std::vector<int> want_satisfied;
};

TEST(PlanLayout, Table) {
  const Bytes G = kGiB;
  const std::vector<Case> cases = {
      {"seven small needs fill an H100 with 1g.10gb", "H100-80GB", "",
       {9 * G, 9 * G, 9 * G, 9 * G, 9 * G, 9 * G, 9 * G},
       "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6",
       {0, 1, 2, 3, 4, 5, 6}},
      // 1g.10gb reports 9.75 GiB usable, so a 10 GiB need takes 1g.20gb: only four fit.
      {"10GiB needs take 1g.20gb on H100", "H100-80GB", "",
       {10 * G, 10 * G, 10 * G, 10 * G, 10 * G, 10 * G, 10 * G},
       "1g.20gb@0 1g.20gb@2 1g.20gb@4 1g.20gb@6", {0, 1, 2, 3}},
      {"needs larger than the device satisfy nobody", "H100-80GB", "3g.40gb@0",
       {200 * G, 80 * G}, "3g.40gb@0", {}},
      {"no pending keeps the layout", "A100-40GB", "2g.10gb@2", {}, "2g.10gb@2", {}},
      {"in_use is kept and the rest is filled", "H100-80GB", "3g.40gb@0",
       {9 * G, 9 * G, 9 * G, 9 * G, 9 * G},
       "3g.40gb@0 1g.10gb@4 1g.10gb@5 1g.10gb@6", {0, 1, 2}},
      // 3g + 1g + 1g + 1g.10gb serves four; 1g.5gb cannot start at slice 7, so the 1g.10gb
      // goes last and the two 3g requests cannot both be served.
      {"mixed sizes maximise the count", "A100-40GB", "",
       {19 * G, 4 * G, 4 * G, 9 * G, 19 * G},
       "3g.20gb@0 1g.5gb@4 1g.5gb@5 1g.10gb@6", {0, 1, 2, 3}},
      // Same count either way; the 1g leaves three memory slices free, the 3g none.
      {"ties prefer more free memory slices over queue order", "A100-40GB", "4g.20gb@0",
       {19 * G, 4 * G}, "4g.20gb@0 1g.5gb@4", {1}},
      {"ties among equal requests follow queue order", "A100-40GB", "",
       {4 * G, 4 * G, 4 * G, 4 * G, 4 * G, 4 * G, 4 * G, 4 * G},
       "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6",
       {0, 1, 2, 3, 4, 5, 6}},
      {"a +me instance in use stays, none is added", "H100-80GB", "1g.10gb+me@3",
       {9 * G, 9 * G, 9 * G, 9 * G, 9 * G, 9 * G, 9 * G},
       "1g.10gb+me@3 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@4 1g.10gb@5 1g.10gb@6",
       {0, 1, 2, 3, 4, 5}},
      {"A30 four 1g.6gb", "A30-24GB", "", {5 * G, 5 * G, 5 * G, 5 * G, 5 * G},
       "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3", {0, 1, 2, 3}},
      {"A30 whole-GPU need beside a busy 1g", "A30-24GB", "1g.6gb@0", {23 * G, 11 * G},
       "1g.6gb@0 2g.12gb@2", {1}},
      {"zero need takes the smallest profile", "H200-141GB", "", {0},
       "1g.18gb@0", {0}},
      {"7g when nothing is in use", "B200", "", {150 * G}, "7g.180gb@0", {0}},
      // One either way; the 1g leaves seven memory slices free.
      {"a 7g need loses the tie to a 1g need", "B200", "", {150 * G, 10 * G}, "1g.23gb@0", {1}},
      {"7g impossible beside in-use work", "B200", "1g.23gb@6", {150 * G, 10 * G},
       "1g.23gb@6 1g.23gb@0", {1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const DeviceModel& m = Model(c.model);
    PlanInput in{&m, Layout(m, c.in_use), c.pending};
    const Plan plan = PlanAndCheck(in);
    EXPECT_EQ(FormatLayout(m, plan.layout), c.want_layout);
    EXPECT_EQ(plan.satisfied, c.want_satisfied);
    EXPECT_EQ(plan.satisfied.size(), BestPossible(in));
  }
}

TEST(PlanLayout, AssignmentPairsRequestsWithTheirInstancesInQueueOrder) {
  const DeviceModel& m = Model("A100-40GB");
  // Requests 1 and 3 want 1g.5gb, 0 wants 3g.20gb; instances land at 1g@4, 1g@5, 3g@0.
  PlanInput in{&m, {}, {19 * kGiB, 4 * kGiB, 40 * kGiB, 4 * kGiB}};
  const Plan plan = PlanAndCheck(in);
  ASSERT_THAT(plan.satisfied, ElementsAre(0, 1, 3));
  EXPECT_EQ(plan.layout[plan.assignment[0]], (MigPlacement{9, 0}));
  EXPECT_EQ(plan.layout[plan.assignment[1]], (MigPlacement{19, 4}));
  EXPECT_EQ(plan.layout[plan.assignment[2]], (MigPlacement{19, 5}));
}

TEST(PlanLayout, DeterministicAndOptimalOnRandomInputs) {
  // Fixed seed: the inputs are the same on every run.
  std::mt19937 rng(20261130);
  const std::vector<Bytes> sizes = {0,        3 * kGiB, 5 * kGiB,  9 * kGiB, 10 * kGiB,
                                    15 * kGiB, 19 * kGiB, 30 * kGiB, 45 * kGiB, 70 * kGiB,
                                    90 * kGiB, 139 * kGiB, 500 * kGiB};
  for (const DeviceModel& m : AllModels()) {
    const std::vector<MigLayout> layouts = EnumerateLayouts(m);
    for (int trial = 0; trial < 25; ++trial) {
      PlanInput in{&m, layouts[rng() % layouts.size()], {}};
      // A random existing layout, in a shuffled (non-canonical) order.
      std::shuffle(in.in_use.begin(), in.in_use.end(), rng);
      const int n = static_cast<int>(rng() % 10);
      for (int i = 0; i < n; ++i) in.pending.push_back(sizes[rng() % sizes.size()]);
      SCOPED_TRACE(m.name + " in_use=[" + FormatLayout(m, in.in_use) + "] n=" +
                   std::to_string(n));
      const Plan a = PlanAndCheck(in);
      const Plan b = PlanAndCheck(in);
      EXPECT_EQ(a.layout, b.layout);
      EXPECT_EQ(a.satisfied, b.satisfied);
      EXPECT_EQ(a.assignment, b.assignment);
      EXPECT_EQ(a.satisfied.size(), BestPossible(in));
    }
  }
}

TEST(PlanLayout, RejectsBadInput) {
  const DeviceModel& m = Model("A100-40GB");
  auto null_model = PlanLayout(PlanInput{nullptr, {}, {kGiB}});
  EXPECT_EQ(null_model.status().code(), StatusCode::kInvalidArgument);

  auto bad_in_use = PlanLayout(PlanInput{&m, {{9, 2}}, {kGiB}});
  ASSERT_FALSE(bad_in_use.ok());
  EXPECT_EQ(bad_in_use.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_in_use.status().message(), HasSubstr("in_use"));
  EXPECT_THAT(bad_in_use.status().message(), HasSubstr("3g.20gb) at start 2"));

  auto negative = PlanLayout(PlanInput{&m, {}, {kGiB, -5}});
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("pending[1]"));
  EXPECT_THAT(negative.status().message(), HasSubstr("-5"));
}

TEST(FirstFreePlacement, LowestFreeLegalStart) {
  const DeviceModel& m = Model("A100-40GB");
  struct Row {
    std::string current;
    std::string profile;
    int want_start;  // -1: NotFound
  };
  const std::vector<Row> rows = {
      {"", "1g.5gb", 0},
      {"1g.5gb@0 1g.5gb@1", "1g.5gb", 2},
      {"3g.20gb@0", "3g.20gb", 4},
      {"3g.20gb@4", "4g.20gb", 0},
      {"1g.5gb@0 1g.5gb@5", "3g.20gb", -1},  // §1.6 I5: free compute, fragmented memory
      {"1g.5gb@0", "1g.10gb", 2},
      {"1g.5gb@0", "2g.10gb", 2},
      {"1g.5gb+me@0", "1g.5gb+me", -1},       // §1.6 I6
      {"7g.40gb@0", "1g.5gb", -1},            // §1.6 I7
      {"1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5", "1g.5gb", 6},
      {"1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6", "1g.5gb", -1},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.current + " + " + r.profile);
    const int id = m.FindProfile(r.profile)->id;
    auto p = FirstFreePlacement(m, Layout(m, r.current), id);
    EXPECT_EQ(HasFreePlacement(m, Layout(m, r.current), id), r.want_start >= 0);
    if (r.want_start < 0) {
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
      EXPECT_THAT(p.status().message(), HasSubstr(r.profile));
    } else {
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(*p, (MigPlacement{id, r.want_start}));
    }
  }
}

TEST(FirstFreePlacement, ExplicitPlacementAvoidsTheDriverOrderTrap) {
  // devices.md §1.6 I8: `-cgi 19,19,14,9` with driver-chosen placement fails on the 3g; placing
  // each at its lowest free legal start succeeds in that order.
  const DeviceModel& m = Model("A100-40GB");
  MigLayout layout;
  for (int id : {19, 19, 14, 9}) {
    auto p = FirstFreePlacement(m, layout, id);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    layout.push_back(*p);
  }
  EXPECT_EQ(FormatLayout(m, layout), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  EXPECT_TRUE(ValidateLayout(m, layout).ok());
}

TEST(FirstFreePlacement, Errors) {
  const DeviceModel& m = Model("H100-80GB");
  auto unknown = FirstFreePlacement(m, {}, 77);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("77"));
  auto bad = FirstFreePlacement(m, {{19, 7}}, 19);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(HasFreePlacement(m, {}, 77));
  EXPECT_FALSE(HasFreePlacement(m, {{19, 7}}, 19));
}

}  // namespace
}  // namespace gpuslice::mig
