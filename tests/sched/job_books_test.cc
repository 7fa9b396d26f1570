// JobBooks (the books of jobs): a new job's record points at its view, an ended job keeps its
// view but not its record, the ended history keeps the newest kEndedHistory and forgets the
// oldest (live jobs are never forgotten), and views and records keep their addresses while
// other jobs come and go.
#include "sched/job_books.h"

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

JobView View(std::uint64_t id) {
  JobView v;
  v.job = JobId(id);
  v.user = "ann";
  return v;
}

Resolved Record(std::uint64_t id) {
  Resolved r;
  r.job = JobId(id);
  r.milli = 500;
  return r;
}

Resolved& Submit(JobBooks& books, std::uint64_t id) {
  auto at = books.Where(JobId(id));
  return books.Add(at, View(id), Record(id));
}

TEST(JobBooks, ANewJobsRecordPointsAtItsView) {
  JobBooks books;
  const auto at = books.Where(JobId(7));
  EXPECT_FALSE(books.Has(at, JobId(7)));
  Resolved& r = books.Add(at, View(7), Record(7));
  EXPECT_TRUE(books.Has(books.Where(JobId(7)), JobId(7)));
  EXPECT_EQ(r.view, books.Find(JobId(7)));
  EXPECT_EQ(&r, books.FindRecord(JobId(7)));
  EXPECT_EQ(&r, &books.RecordOf(JobId(7)));
  EXPECT_EQ(r.milli, 500);
  EXPECT_EQ(books.views().size(), 1u);
  EXPECT_EQ(books.records().size(), 1u);
  EXPECT_EQ(books.Find(JobId(8)), nullptr);
  EXPECT_EQ(books.FindRecord(JobId(8)), nullptr);
}

TEST(JobBooks, AnEndedJobKeepsItsViewButNotItsRecord) {
  JobBooks books;
  Resolved& r = Submit(books, 1);
  Submit(books, 2);
  books.End(*r.view, 42, "finished");
  const JobView* v = books.Find(JobId(1));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->state, JobState::kEnded);
  EXPECT_EQ(v->end_time, 42);
  EXPECT_EQ(v->end_reason, "finished");
  EXPECT_EQ(books.FindRecord(JobId(1)), nullptr);
  EXPECT_NE(books.FindRecord(JobId(2)), nullptr);
  EXPECT_EQ(books.records().size(), 1u);
}

TEST(JobBooks, AJobEndedAtSubmitHasOnlyAView) {
  JobBooks books;
  Submit(books, 2);
  books.End(books.AddView(books.Where(JobId(1)), View(1)), 5, "rejected");
  EXPECT_EQ(books.at(JobId(1)).end_reason, "rejected");
  EXPECT_EQ(books.FindRecord(JobId(1)), nullptr);
  EXPECT_NE(books.FindRecord(JobId(2)), nullptr);
}

TEST(JobBooks, TheHistoryKeepsTheNewestEndedJobsAndForgetsTheOldest) {
  constexpr std::size_t n = JobBooks::kEndedHistory;
  JobBooks books;
  Submit(books, 0);  // stays pending throughout: never forgotten
  for (std::uint64_t id = 1; id <= n + 2; ++id) books.End(*Submit(books, id).view, 0, "finished");
  EXPECT_EQ(books.Find(JobId(1)), nullptr);
  EXPECT_EQ(books.Find(JobId(2)), nullptr);
  ASSERT_NE(books.Find(JobId(3)), nullptr);
  EXPECT_NE(books.Find(JobId(n + 2)), nullptr);
  EXPECT_NE(books.Find(JobId(0)), nullptr);
  EXPECT_NE(books.FindRecord(JobId(0)), nullptr);
  EXPECT_EQ(books.views().size(), n + 1);
}

TEST(JobBooks, ViewsAndRecordsKeepTheirAddresses) {
  JobBooks books;
  Resolved& r = Submit(books, 500);
  JobView* v = r.view;
  // Other jobs come and go around it, enough to rehash the records and recycle nodes.
  for (std::uint64_t id = 1; id <= 2000; ++id) {
    if (id == 500) continue;
    Resolved& other = Submit(books, id);
    if (id % 2) books.End(*other.view, 0, "finished");
  }
  EXPECT_EQ(books.FindRecord(JobId(500)), &r);
  EXPECT_EQ(books.Find(JobId(500)), v);
  EXPECT_EQ(r.view, v);
  EXPECT_EQ(r.job, JobId(500));
}

}  // namespace
}  // namespace gpuslice::sched
