// TeamShares (the scheduler's team part): a slice starts and ends in the team books and the
// take-back index together, the index lists slices newest first per (team, queue) and keeps no
// empty entries, a job of no team is indexed but not booked, Clear() forgets what runs but not
// usage, and the fair-share levels are usage over weight.
#include "sched/team_shares.h"

#include <limits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

struct Running {
  Resolved job;
  SliceView slice;
};

Running Slice(int team, const QueueConfig& q, std::uint64_t id, Micros start) {
  Running r;
  r.job.team = team;
  r.job.queue = &q;
  r.slice.slice = SliceId(id);
  r.slice.start_time = start;
  return r;
}

std::vector<std::uint64_t> Listed(const TeamShares& t, int team, const QueueConfig& q) {
  std::vector<std::uint64_t> out;
  auto it = t.take_back().find({team, &q});
  if (it == t.take_back().end()) return out;
  for (const TeamShares::Takeable& k : it->second) out.push_back(k.slice.value());
  return out;
}

TEST(TeamShares, ASliceStartsAndEndsInTheBooksAndTheTakeBackIndexTogether) {
  QueueConfig q;
  q.name = "training";
  TeamShares t;
  const int vision = t.IdOf("vision");
  Running a = Slice(vision, q, 1, 10), b = Slice(vision, q, 2, 20), c = Slice(vision, q, 3, 20);
  t.Count(a.job, a.slice, 1000, 1000, /*take_back=*/true, +1, 10);
  t.Count(b.job, b.slice, 500, 1000, true, +1, 20);
  t.Count(c.job, c.slice, 500, 1000, true, +1, 20);
  EXPECT_EQ(t.Held(vision, "training"), 2000);
  EXPECT_EQ(t.Borrowed(vision), 1000);
  EXPECT_EQ(Listed(t, vision, q), (std::vector<std::uint64_t>{3, 2, 1})) << "newest first, then higher slice id";
  EXPECT_EQ(t.take_back().at({vision, &q}).begin()->view, &c.slice);
  t.Count(b.job, b.slice, 500, 1000, true, -1, 30);
  EXPECT_EQ(t.Held(vision, "training"), 1500);
  EXPECT_EQ(Listed(t, vision, q), (std::vector<std::uint64_t>{3, 1}));
  t.Count(a.job, a.slice, 1000, 1000, true, -1, 30);
  t.Count(c.job, c.slice, 500, 1000, true, -1, 30);
  EXPECT_EQ(t.Held(vision, "training"), 0);
  EXPECT_TRUE(t.take_back().empty()) << "no empty entries";
}

TEST(TeamShares, OutsideTakeBackOnlyTheBooksAndWithoutATeamOnlyTheIndex) {
  QueueConfig q;
  q.name = "training";
  TeamShares t;
  const int nlp = t.IdOf("nlp");
  Running kept = Slice(nlp, q, 1, 0), loner = Slice(TeamShares::kNone, q, 2, 0);
  t.Count(kept.job, kept.slice, 1000, 0, /*take_back=*/false, +1, 0);
  EXPECT_EQ(t.Held(nlp, "training"), 1000);
  EXPECT_TRUE(t.take_back().empty());
  t.Count(loner.job, loner.slice, 1000, 0, true, +1, 0);
  EXPECT_EQ(Listed(t, TeamShares::kNone, q), (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(t.Held(nlp, "training"), 1000) << "a job of no team is in no team's books";
}

TEST(TeamShares, ClearForgetsWhatRunsButKeepsUsage) {
  QueueConfig q;
  q.name = "training";
  TeamShares t(kHour);
  const int vision = t.IdOf("vision");
  Running a = Slice(vision, q, 1, 0);
  t.Count(a.job, a.slice, 1000, 0, true, +1, 0);
  t.Clear(kHour);
  EXPECT_EQ(t.Held(vision, "training"), 0);
  EXPECT_EQ(t.Borrowed(vision), 0);
  EXPECT_TRUE(t.take_back().empty());
  EXPECT_GT(t.Usage(vision, kHour), 0.0);
  EXPECT_EQ(t.Usage(vision, 2 * kHour), t.Usage(vision, kHour) / 2) << "nothing held: it only decays";
}

TEST(TeamShares, LevelsAreUsageOverWeightAndNoTeamComesLast) {
  QueueConfig q;
  q.name = "training";
  TeamShares t(kHour);
  const int vision = t.IdOf("vision"), nlp = t.IdOf("nlp"), gone = t.IdOf("gone");
  Running a = Slice(vision, q, 1, 0), b = Slice(nlp, q, 2, 0), c = Slice(gone, q, 3, 0);
  for (Running* r : {&a, &b, &c}) t.Count(r->job, r->slice, 1000, 0, false, +1, 0);
  TeamsConfig teams;
  for (const auto& [name, weight] : {std::pair("nlp", 4), std::pair("vision", 2)}) {  // sorted by name
    TeamConfig c;
    c.name = name;
    c.weight = weight;
    teams.teams.push_back(c);
  }
  t.ComputeLevels(teams, kHour);
  const double used = t.Usage(vision, kHour);
  ASSERT_GT(used, 0.0);
  EXPECT_EQ(t.LevelOf(vision), used / 2);
  EXPECT_EQ(t.LevelOf(nlp), used / 4);
  EXPECT_EQ(t.LevelOf(gone), used) << "a team the config no longer has weighs 1";
  EXPECT_EQ(t.LevelOf(TeamShares::kNone), std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace gpuslice::sched
