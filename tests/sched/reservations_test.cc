// Reservations: one reservation held at a time, and the search for the next: jobs that waited
// their queue's reserve_after, in queue order across queues, passing over the ineligible and
// those no host can have room for, ending at the first that gets one.
#include "sched/reservations.h"

#include <deque>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

struct Books {
  std::deque<Resolved> jobs;  // stable addresses
  std::map<const QueueConfig*, PendingQueue::Book> queues;

  void Add(const QueueConfig& q, std::uint64_t id, Micros submit, int gpus, std::string model = "") {
    Resolved& r = jobs.emplace_back();
    r.job = JobId(id);
    r.queue = &q;
    r.submit = submit;
    r.kind = SliceKind::kWhole;
    r.gpus = gpus;
    r.model = std::move(model);
    queues[&q].emplace(PendingKeyOf(r), &r);
  }
};

// The search reads only these of a queue.
QueueConfig Queue(int priority, Micros reserve_after) {
  QueueConfig q;
  q.priority = priority;
  q.reserve_after = reserve_after;
  return q;
}

// The jobs offered to `reserve`, in order, when it reserves for `winner` (0: none).
std::vector<std::uint64_t> Offered(Reservations& res, const Books& b, Micros now, std::uint64_t winner = 0,
                                   std::uint64_t ineligible = 0) {
  std::vector<std::uint64_t> out;
  res.Search(b.queues, now, [&](const Resolved& r) { return r.job.value() != ineligible; },
             [&](const Resolved& r) {
               out.push_back(r.job.value());
               return r.job.value() == winner;
             });
  return out;
}

TEST(Reservations, JobsThatWaitedLongEnoughAreOfferedInQueueOrderAcrossQueues) {
  const QueueConfig high = Queue(10, 100), low = Queue(0, 10);
  Books b;
  b.Add(low, 1, 0, 1, "a");
  b.Add(high, 2, 50, 1, "b");
  b.Add(high, 3, 5, 1, "c");
  b.Add(low, 4, 20, 1, "d");
  Reservations res;
  for (const QueueConfig* q : {&high, &low}) res.NoteQueue(*q);
  // At 110: high's job 3 (waited 105) but not its job 2 (60); low's 1 and 4 waited 110 and 90.
  EXPECT_EQ(Offered(res, b, 110), (std::vector<std::uint64_t>{3, 1, 4}));
  EXPECT_EQ(Offered(res, b, 110, /*winner=*/1), (std::vector<std::uint64_t>{3, 1})) << "ends at the first reserved";
  EXPECT_EQ(Offered(res, b, 110, 0, /*ineligible=*/3), (std::vector<std::uint64_t>{1, 4}));
}

TEST(Reservations, AskingAsManyDevicesOfAModelThatHadNoRoomIsPassedOver) {
  const QueueConfig q = Queue(0, 1);
  Books b;
  b.Add(q, 1, 0, 4, "H100");
  b.Add(q, 2, 1, 8, "H100");  // more of the same model: no room either
  b.Add(q, 3, 2, 2, "H100");  // fewer: may fit
  b.Add(q, 4, 3, 8, "A100");  // another model
  b.Add(q, 5, 4, 4, "H100");
  Reservations res;
  res.NoteQueue(q);
  EXPECT_EQ(Offered(res, b, 100), (std::vector<std::uint64_t>{1, 3, 4}));
}

TEST(Reservations, OneIsHeldAtATimeAndNoSearchWithoutAReservingQueue) {
  const QueueConfig never = Queue(0, 0);
  Books b;
  b.Add(never, 1, 0, 1);
  Reservations res;
  res.NoteQueue(never);
  EXPECT_TRUE(Offered(res, b, 100).empty()) << "no queue reserves";
  const QueueConfig q = Queue(0, 1);
  b.queues.clear();  // the books hold only queues that reserve (PendingQueue::reserving())
  b.Add(q, 2, 0, 1);
  res.NoteQueue(q);
  EXPECT_EQ(Offered(res, b, 100), (std::vector<std::uint64_t>{2}));
  res.NoteQueue(never);  // a queue that does not reserve turns nothing off
  res.Hold({JobId(2), NodeId(7), {DeviceIndex(0), DeviceIndex(3)}});
  EXPECT_TRUE(res.Holds(JobId(2)));
  EXPECT_FALSE(res.Holds(JobId(1)));
  ASSERT_NE(res.held(), nullptr);
  EXPECT_EQ(res.held()->node, NodeId(7));
  EXPECT_TRUE(Offered(res, b, 100).empty()) << "one reservation at a time";
  const std::optional<Reservations::Reservation> back = res.Release();
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->devices, (std::vector<DeviceIndex>{DeviceIndex(0), DeviceIndex(3)}));
  EXPECT_EQ(res.held(), nullptr);
  EXPECT_FALSE(res.Release().has_value());
  EXPECT_EQ(Offered(res, b, 100), (std::vector<std::uint64_t>{2}));
}

}  // namespace
}  // namespace gpuslice::sched
