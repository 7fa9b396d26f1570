// The accounting logic of libgpuslice-cuda linked directly (no preload), so it also runs under
// ASan/UBSan: the shared segment's reserve/commit/cancel/release, reclaiming dead processes,
// recovery from a process that died holding the lock, the pointer table, segment names, and the
// executor-side functions of env.h.

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include <gtest/gtest.h>

#include "memcap/env.h"
#include "memcap/ptr_table.h"
#include "memcap/segment.h"

namespace gpuslice::memcap {
namespace {

// Liveness decided by the test: pids in g_dead are dead.
std::set<std::int32_t>* g_dead = nullptr;
bool TestAlive(std::int32_t pid, std::uint64_t) { return g_dead == nullptr || !g_dead->count(pid); }

// A segment in MAP_SHARED anonymous memory, so a forked child shares it like another process.
class SegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    seg_ = static_cast<Segment*>(p);
    ASSERT_TRUE(InitSegment(seg_, 1000));
    g_dead = &dead_;
  }
  void TearDown() override {
    g_dead = nullptr;
    munmap(seg_, sizeof(Segment));
  }
  std::int64_t Used() { return Read(seg_, nullptr).used; }

  Segment* seg_ = nullptr;
  std::set<std::int32_t> dead_;
};

TEST_F(SegmentTest, ReserveCommitCancelRelease) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  ASSERT_GE(a, 0);
  EXPECT_EQ(Reserve(seg_, a, 101, 600, &TestAlive), ReserveResult::kOk);
  EXPECT_EQ(Used(), 600);
  EXPECT_EQ(Reserve(seg_, a, 101, 401, &TestAlive), ReserveResult::kOverCap);
  EXPECT_EQ(Used(), 600);  // a refusal changes nothing
  Commit(seg_, a, 101, 600);
  EXPECT_EQ(seg_->slots[a].committed, 600);
  EXPECT_EQ(seg_->slots[a].inflight, 0);
  EXPECT_EQ(Reserve(seg_, a, 101, 400, &TestAlive), ReserveResult::kOk);
  Cancel(seg_, a, 101, 400);  // the driver failed
  EXPECT_EQ(Used(), 600);
  Release(seg_, a, 101, 600);
  EXPECT_EQ(Used(), 0);
  Release(seg_, a, 101, 50);  // more than committed: clamped, never negative
  EXPECT_EQ(Used(), 0);
  EXPECT_EQ(seg_->slots[a].committed, 0);
}

TEST_F(SegmentTest, AClaimByAProcessThatHoldsASlotIsANewImageAndStartsEmpty) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  int b = ClaimSlot(seg_, 102, 9, &TestAlive);
  ASSERT_EQ(Reserve(seg_, a, 101, 600, &TestAlive), ReserveResult::kOk);
  Commit(seg_, a, 101, 600);
  ASSERT_EQ(Reserve(seg_, b, 102, 100, &TestAlive), ReserveResult::kOk);
  // pid 101 exec'd: same pid, same start time, a new image claiming its slot.
  EXPECT_EQ(ClaimSlot(seg_, 101, 7, &TestAlive), a);
  EXPECT_EQ(seg_->slots[a].committed, 0);
  EXPECT_EQ(Used(), 100) << "only the neighbour's in-flight bytes remain";
  EXPECT_EQ(Reserve(seg_, a, 101, 900, &TestAlive), ReserveResult::kOk);
}

TEST_F(SegmentTest, ExactlyTheCapFitsAndHugeRequestsDoNotOverflow) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  EXPECT_EQ(Reserve(seg_, a, 101, 1000, &TestAlive), ReserveResult::kOk);
  EXPECT_EQ(Reserve(seg_, a, 101, INT64_MAX, &TestAlive), ReserveResult::kOverCap);
  EXPECT_EQ(Reserve(seg_, a, 101, -5, &TestAlive), ReserveResult::kOverCap);
}

TEST_F(SegmentTest, SlotsAreSharedAndDeadProcessesReclaimedOnlyWhenNeeded) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  int b = ClaimSlot(seg_, 102, 7, &TestAlive);
  ASSERT_NE(a, b);
  EXPECT_EQ(Reserve(seg_, a, 101, 700, &TestAlive), ReserveResult::kOk);  // in flight, never committed
  EXPECT_EQ(Reserve(seg_, b, 102, 400, &TestAlive), ReserveResult::kOverCap);
  dead_.insert(101);
  EXPECT_EQ(Reserve(seg_, b, 102, 400, &TestAlive), ReserveResult::kOk);
  EXPECT_EQ(seg_->slots[a].pid, 0);
  EXPECT_EQ(Used(), 400);
  // The dead process's stale calls cannot touch the slot any more, even once it is reused.
  int c = ClaimSlot(seg_, 103, 7, &TestAlive);
  EXPECT_EQ(c, a);
  Commit(seg_, a, 101, 700);
  Release(seg_, a, 101, 700);
  EXPECT_EQ(Reserve(seg_, a, 101, 1, &TestAlive), ReserveResult::kNotOwner);
  EXPECT_EQ(Used(), 400);
}

TEST_F(SegmentTest, ConcurrentReservationsNeverPassTheCap) {
  // Eight "processes" (threads with their own slots) race for a cap of 1000 in chunks of 300:
  // what the driver holds at any moment never exceeds the cap, and everything comes back.
  std::atomic<std::int64_t> held{0};
  std::atomic<std::int64_t> peak{0};
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::int32_t pid = 200 + t;
      int slot = ClaimSlot(seg_, pid, 1, &TestAlive);
      ASSERT_GE(slot, 0);
      for (int i = 0; i < 2000; ++i) {
        if (Reserve(seg_, slot, pid, 300, &TestAlive) != ReserveResult::kOk) continue;
        std::int64_t now = held.fetch_add(300) + 300;
        std::int64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        Commit(seg_, slot, pid, 300);
        granted.fetch_add(1);
        held.fetch_sub(300);
        Release(seg_, slot, pid, 300);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(peak.load(), 1000);
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(Used(), 0);
}

TEST_F(SegmentTest, PidReuseIsToldApartByStartTime) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  EXPECT_EQ(ClaimSlot(seg_, 101, 7, &TestAlive), a);  // same process claims again: same slot
  EXPECT_NE(ClaimSlot(seg_, 101, 8, &TestAlive), a);  // a new process with a recycled pid
}

TEST_F(SegmentTest, ReadCountsLiveProcessesAndReclaimsDeadOnes) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  int b = ClaimSlot(seg_, 102, 7, &TestAlive);
  ASSERT_EQ(Reserve(seg_, a, 101, 100, &TestAlive), ReserveResult::kOk);
  ASSERT_EQ(Reserve(seg_, b, 102, 200, &TestAlive), ReserveResult::kOk);
  dead_.insert(102);
  Snapshot s = Read(seg_, &TestAlive);
  EXPECT_EQ(s.cap, 1000);
  EXPECT_EQ(s.used, 100);
  EXPECT_EQ(s.processes, 1);
}

TEST_F(SegmentTest, FullSegmentReusesDeadSlotsOrRefuses) {
  for (int i = 0; i < kMaxSlots; ++i) ASSERT_GE(ClaimSlot(seg_, 1000 + i, 1, &TestAlive), 0);
  EXPECT_EQ(ClaimSlot(seg_, 5000, 1, &TestAlive), -1);
  dead_.insert(1000 + 17);
  EXPECT_EQ(ClaimSlot(seg_, 5000, 1, &TestAlive), 17);
}

TEST_F(SegmentTest, OwnerDyingWithTheLockLeavesARepairedSegment) {
  int a = ClaimSlot(seg_, 101, 7, &TestAlive);
  ASSERT_EQ(Reserve(seg_, a, 101, 300, &TestAlive), ReserveResult::kOk);
  pid_t child = fork();
  if (child == 0) {
    // Dies half-way through a change: `used` is wrong and the lock is held.
    pthread_mutex_lock(&seg_->mu);
    seg_->used = 999;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // The next locker gets EOWNERDEAD, recomputes `used` from the slots and carries on.
  EXPECT_EQ(Reserve(seg_, a, 101, 700, &TestAlive), ReserveResult::kOk);
  EXPECT_EQ(Used(), 1000);
}

TEST_F(SegmentTest, RealLivenessSeesThisProcessAndNotAReapedChild) {
  std::int32_t self = static_cast<std::int32_t>(getpid());
  std::uint64_t start = ProcessStartTime(self);
  EXPECT_GT(start, 0u);
  EXPECT_TRUE(ProcessAlive(self, start));
  EXPECT_FALSE(ProcessAlive(self, start + 1));  // same pid, different process
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_FALSE(ProcessAlive(child, 0));
}

TEST(PtrTableTest, MatchesAReferenceMapUnderRandomOperations) {
  PtrTable table;
  std::unordered_map<std::uint64_t, std::int64_t> reference;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    std::uint64_t key = (rng() % 5000 + 1) * 256;  // aligned like device pointers
    if (rng() % 3 != 0) {
      std::int64_t bytes = static_cast<std::int64_t>(rng() % 1000000);
      ASSERT_TRUE(table.Put(key, bytes));
      reference[key] = bytes;
    } else {
      auto it = reference.find(key);
      std::int64_t expected = it == reference.end() ? -1 : it->second;
      ASSERT_EQ(table.Take(key), expected) << "key " << key << " at step " << i;
      if (it != reference.end()) reference.erase(it);
    }
    ASSERT_EQ(table.size(), reference.size());
  }
  EXPECT_FALSE(table.Put(0, 1));
  EXPECT_EQ(table.Take(0), -1);
}

TEST(SegmentNameTest, KeepsSafeKeysAndHashesTheRest) {
  EXPECT_EQ(SegmentName("job-42.s0"), "/gpuslice-memcap-job-42.s0");
  std::string a = SegmentName("team/a b");
  std::string b = SegmentName("team_a_b");
  EXPECT_NE(a, b);  // sanitised to the same text, told apart by the hash
  EXPECT_EQ(a.rfind("/gpuslice-memcap-team_a_b-", 0), 0u);
  EXPECT_EQ(a.find('/', 1), std::string::npos);
  std::string long_key(300, 'k');
  std::string n = SegmentName(long_key);
  EXPECT_LT(n.size(), 128u);
  EXPECT_NE(n, SegmentName(long_key + "x"));
}

TEST(EnvBytesTest, OnlyPlainDecimalsInRange) {
  std::int64_t v = -1;
  EXPECT_TRUE(ParseEnvBytes("0", &v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(ParseEnvBytes("1073741824", &v));
  EXPECT_EQ(v, kGiB);
  EXPECT_TRUE(ParseEnvBytes("4611686018427387904", &v));  // kMaxEnvBytes
  EXPECT_EQ(v, kMaxEnvBytes);
  v = 7;
  for (const char* bad : {"", "4611686018427387905", "99999999999999999999", "-1", "+5", " 5",
                          "5 ", "1e9", "1GiB", "0x10"}) {
    EXPECT_FALSE(ParseEnvBytes(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 7) << "'" << bad << "'";
  }
  EXPECT_FALSE(ParseEnvBytes(nullptr, &v));
}

TEST(EnvTest, LibraryPathHonoursTheOverride) {
  setenv("GPUSLICE_CUDA_LIB", "/opt/x/libgpuslice-cuda.so", 1);
  EXPECT_EQ(LibraryPath(), "/opt/x/libgpuslice-cuda.so");
  auto env = SliceEnvironment("k", 5 * kGiB);
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0], std::make_pair(std::string("LD_PRELOAD"), std::string("/opt/x/libgpuslice-cuda.so")));
  EXPECT_EQ(env[1].second, "5368709120");
  unsetenv("GPUSLICE_CUDA_LIB");
}

TEST(EnvTest, SegmentLifecycleThroughTheExecutorFunctions) {
  std::string key = "acct-test-" + std::to_string(getpid());
  EXPECT_EQ(ReadSliceUsage(key).status().code(), StatusCode::kNotFound);
  Segment* seg = MapSegment(SegmentName(key).c_str(), 4096, /*create=*/true);
  ASSERT_NE(seg, nullptr);
  std::int32_t self = static_cast<std::int32_t>(getpid());
  int slot = ClaimSlot(seg, self, ProcessStartTime(self), &ProcessAlive);
  ASSERT_EQ(Reserve(seg, slot, self, 1024, &ProcessAlive), ReserveResult::kOk);
  Commit(seg, slot, self, 1024);
  // A second mapping (another process would do the same) sees the same figures.
  Result<SliceUsage> usage = ReadSliceUsage(key);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_EQ(usage->cap, 4096);
  EXPECT_EQ(usage->used, 1024);
  EXPECT_EQ(usage->processes, 1);
  UnmapSegment(seg);
  EXPECT_TRUE(RemoveSliceSegment(key).ok());
  EXPECT_TRUE(RemoveSliceSegment(key).ok());  // already gone is fine
  EXPECT_EQ(ReadSliceUsage(key).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::memcap
