// End-to-end tests of libgpuslice-cuda.so: real child processes (memcap_child) linked against a
// fake libcuda.so.1, with the interposer preloaded through the executor's own SliceEnvironment().
// The fake counts the allocations that reach it, so "refused without calling the driver" is
// observable. The parent may run under ASan; the children are uninstrumented.

#include <unistd.h>

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "memcap/env.h"
#include "tests/memcap/child_process.h"

namespace gpuslice::memcap {
namespace {

using testing::ChildProcess;
using testing::EnvList;

constexpr const char* kChild = GPUSLICE_BUILD_DIR "/tests/memcap/memcap_child";
constexpr Bytes kCap = kGiB;
constexpr const char* kOom = "err 2";  // CUDA_ERROR_OUT_OF_MEMORY

class MemcapPreloadTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(LibraryPath().empty()) << "libgpuslice-cuda.so not built"; }
  void TearDown() override {
    for (const auto& key : keys_) EXPECT_TRUE(RemoveSliceSegment(key).ok());
  }

  // A slice key unique to this test run, so runs never share a segment.
  std::string Slice(const std::string& name) {
    std::string key = "test-" + std::to_string(getpid()) + "-" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + name;
    for (char& c : key) {
      if (c == '/') c = '_';
    }
    keys_.push_back(key);
    return key;
  }

  std::unique_ptr<ChildProcess> Start(const std::string& slice, Bytes cap, EnvList extra = {}) {
    EnvList env = SliceEnvironment(slice, cap);
    env.insert(env.end(), extra.begin(), extra.end());
    auto child = std::make_unique<ChildProcess>(kChild, env);
    EXPECT_TRUE(child->started());
    return child;
  }

  std::vector<std::string> keys_;
};

TEST_F(MemcapPreloadTest, EnvironmentPreloadsTheLibrary) {
  EnvList env = SliceEnvironment("s1", kCap);
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0].first, "LD_PRELOAD");
  EXPECT_EQ(env[0].second, LibraryPath());
  EXPECT_EQ(env[1], std::make_pair(std::string("GPUSLICE_MEMCAP_BYTES"), std::to_string(kCap)));
  EXPECT_EQ(env[2], std::make_pair(std::string("GPUSLICE_SLICE"), std::string("s1")));
  EXPECT_TRUE(SliceEnvironment("s1", 0).empty());
  // With the device's context reserve, each process is charged it (the daemon passes it).
  EnvList with_context = SliceEnvironment("s1", kCap, 256 * kMiB);
  ASSERT_EQ(with_context.size(), 4u);
  EXPECT_EQ(with_context[3], std::make_pair(std::string(kEnvContextBytes), std::to_string(256 * kMiB)));
}

TEST_F(MemcapPreloadTest, WithoutPreloadTheFakeDriverHasNoCap) {
  ChildProcess child(kChild, {});
  EXPECT_EQ(child.Send("alloc 3G"), "ok 0");
  EXPECT_EQ(child.Send("calls"), "ok 1 " + std::to_string(3 * kGiB));
}

TEST_F(MemcapPreloadTest, UnderTheCapSucceedsOverItFailsWithoutCallingTheDriver) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("alloc 512M"), "ok 0");
  EXPECT_EQ(child->Send("alloc 512M"), "ok 1");
  EXPECT_EQ(child->Send("alloc 1"), kOom);
  EXPECT_EQ(child->Send("calls"), "ok 2 " + std::to_string(kGiB));
}

TEST_F(MemcapPreloadTest, FreesGiveBytesBack) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("alloc 600M"), "ok 0");
  EXPECT_EQ(child->Send("alloc 600M"), kOom);
  EXPECT_EQ(child->Send("free 0"), "ok");
  EXPECT_EQ(child->Send("alloc 600M"), "ok 1");
  EXPECT_EQ(child->Send("managed 600M"), kOom);
  EXPECT_EQ(child->Send("free 1"), "ok");
  EXPECT_EQ(child->Send("managed 600M"), "ok 2");
}

TEST_F(MemcapPreloadTest, MemGetInfoReportsTheSliceCap) {
  std::string slice = Slice("a");
  auto a = Start(slice, kCap);
  auto b = Start(slice, kCap);
  EXPECT_EQ(a->Send("info"), "ok " + std::to_string(kGiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(a->Send("alloc 256M"), "ok 0");
  std::string expected = "ok " + std::to_string(768 * kMiB) + " " + std::to_string(kGiB);
  EXPECT_EQ(a->Send("info"), expected);
  EXPECT_EQ(b->Send("info"), expected);  // the whole slice's usage, not the process's
  EXPECT_EQ(b->Send("totalmem"), "ok " + std::to_string(kGiB));
}

TEST_F(MemcapPreloadTest, ContextChargeIsTakenOncePerProcess) {
  std::string slice = Slice("a");
  EnvList ctx = {{kEnvContextBytes, std::to_string(256 * kMiB)}};
  auto a = Start(slice, kCap, ctx);
  EXPECT_EQ(a->Send("info"), "ok " + std::to_string(768 * kMiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(a->Send("alloc 512M"), "ok 0");
  auto b = Start(slice, kCap, ctx);
  EXPECT_EQ(b->Send("alloc 1"), kOom);  // b's own context took the last 256 MiB
  EXPECT_EQ(a->Send("free 0"), "ok");
  EXPECT_EQ(b->Send("alloc 512M"), "ok 0");
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, kGiB);
}

TEST_F(MemcapPreloadTest, OverflowingContextChargeIsIgnored) {
  // strtoll made this LLONG_MAX; charged to a second process of the slice it overflowed the
  // slice's shared usage (undefined behaviour) and left the slice full: every allocation of
  // every process was refused. Now it is ignored like any other unreadable charge.
  std::string slice = Slice("a");
  auto a = Start(slice, kCap);
  EXPECT_EQ(a->Send("alloc 512M"), "ok 0");
  auto b = Start(slice, kCap, {{kEnvContextBytes, "99999999999999999999"}});
  EXPECT_EQ(b->Send("alloc 4G"), kOom);
  EXPECT_EQ(b->Send("alloc 512M"), "ok 0");
}

TEST_F(MemcapPreloadTest, ReportsNeverExceedTheDevice) {
  // A cap above the device's memory: totals are the device's, never the cap.
  auto child = Start(Slice("a"), 100 * kGiB, {{"FAKECUDA_TOTAL_BYTES", std::to_string(8 * kGiB)}});
  EXPECT_EQ(child->Send("totalmem"), "ok " + std::to_string(8 * kGiB));
  EXPECT_EQ(child->Send("alloc 2G"), "ok 0");
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(6 * kGiB) + " " + std::to_string(8 * kGiB));
}

TEST_F(MemcapPreloadTest, ProcessesOfOneSliceShareTheCap) {
  std::string slice = Slice("a");
  auto a = Start(slice, kCap);
  auto b = Start(slice, kCap);
  auto c = Start(slice, kCap);
  EXPECT_EQ(a->Send("alloc 400M"), "ok 0");
  EXPECT_EQ(b->Send("alloc 400M"), "ok 0");
  EXPECT_EQ(c->Send("alloc 400M"), kOom);
  EXPECT_EQ(c->Send("alloc 200M"), "ok 0");
  EXPECT_EQ(a->Send("free 0"), "ok");
  EXPECT_EQ(c->Send("alloc 400M"), "ok 1");
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_EQ(usage->cap, kCap);
  EXPECT_EQ(usage->used, 1000 * kMiB);
  EXPECT_EQ(usage->processes, 3);
}

TEST_F(MemcapPreloadTest, TwoSlicesDoNotSeeEachOthersUsage) {
  auto x = Start(Slice("x"), kCap);
  auto y = Start(Slice("y"), kCap);
  EXPECT_EQ(x->Send("alloc 900M"), "ok 0");
  EXPECT_EQ(y->Send("alloc 900M"), "ok 0");
  EXPECT_EQ(y->Send("info"), "ok " + std::to_string(124 * kMiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(x->Send("alloc 200M"), kOom);
}

TEST_F(MemcapPreloadTest, ProcessKilledInsideTheDriverReturnsItsReservation) {
  std::string slice = Slice("a");
  auto victim = Start(slice, kCap, {{"FAKECUDA_BLOCK_BYTES", std::to_string(700 * kMiB)}});
  auto survivor = Start(slice, kCap);
  // The victim has reserved 700 MiB and hangs inside the (fake) driver allocation.
  EXPECT_EQ(victim->Send("alloc 700M"), "blocked");
  EXPECT_EQ(survivor->Send("alloc 400M"), kOom);
  victim->Kill();
  EXPECT_EQ(survivor->Send("alloc 400M"), "ok 0");
  EXPECT_EQ(survivor->Send("alloc 600M"), "ok 1");
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, 1000 * kMiB);
  EXPECT_EQ(usage->processes, 1);
}

TEST_F(MemcapPreloadTest, ProcessKilledHoldingMemoryReturnsIt) {
  std::string slice = Slice("a");
  auto victim = Start(slice, kCap);
  auto survivor = Start(slice, kCap);
  EXPECT_EQ(victim->Send("alloc 800M"), "ok 0");
  EXPECT_EQ(survivor->Send("info"), "ok " + std::to_string(224 * kMiB) + " " + std::to_string(kGiB));
  victim->Kill();
  EXPECT_EQ(survivor->Send("info"), "ok " + std::to_string(kGiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(survivor->Send("alloc 800M"), "ok 0");
}

TEST_F(MemcapPreloadTest, CleanExitReturnsBytesAtOnce) {
  std::string slice = Slice("a");
  auto first = Start(slice, kCap);
  EXPECT_EQ(first->Send("alloc 800M"), "ok 0");
  EXPECT_EQ(first->Send("exit"), "ok");
  EXPECT_EQ(first->Finish(), 0);
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, 0);
  auto second = Start(slice, kCap);
  EXPECT_EQ(second->Send("alloc 800M"), "ok 0");
}

TEST_F(MemcapPreloadTest, ForkedChildrenAreSeparateProcessesOfTheSlice) {
  std::string slice = Slice("a");
  auto parent = Start(slice, kCap);
  EXPECT_EQ(parent->Send("alloc 600M"), "ok 0");
  EXPECT_EQ(parent->Send("forkalloc 600M"), kOom);  // the parent's 600 MiB count for the child
  EXPECT_EQ(parent->Send("forkalloc 400M"), "ok");
  // The child is gone (reaped): only the parent's bytes remain.
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, 600 * kMiB);
  EXPECT_EQ(usage->processes, 1);
  EXPECT_EQ(parent->Send("free 0"), "ok");
  EXPECT_EQ(parent->Send("alloc 1G"), "ok 1");
}

TEST_F(MemcapPreloadTest, AsyncAndPoolAllocations) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("async 600M"), "ok 0");
  EXPECT_EQ(child->Send("pool 600M"), kOom);
  EXPECT_EQ(child->Send("freeasync 0"), "ok");
  EXPECT_EQ(child->Send("pool 600M"), "ok 1");
  EXPECT_EQ(child->Send("async 600M"), kOom);
  EXPECT_EQ(child->Send("free 1"), "ok");  // cuMemFree of a pool allocation is legal
  EXPECT_EQ(child->Send("async 1G"), "ok 2");
}

TEST_F(MemcapPreloadTest, VmmHandlesCountOnlyDeviceMemory) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("create 768M"), "ok 0");
  EXPECT_EQ(child->Send("create 512M"), kOom);
  EXPECT_EQ(child->Send("createhost 2G"), "ok 1");  // pinned host memory is not capped
  EXPECT_EQ(child->Send("free 0"), "ok");          // cuMemRelease
  EXPECT_EQ(child->Send("create 1G"), "ok 2");
}

TEST_F(MemcapPreloadTest, ArraysAreSizedFromTheirDescriptor) {
  auto child = Start(Slice("a"), kCap);
  // FLOAT x 1 channel = 4 bytes: 16384 x 16384 = 1 GiB, 16384 x 8192 x 2 layers = 1 GiB.
  EXPECT_EQ(child->Send("array 16384 16384"), "ok 0");
  EXPECT_EQ(child->Send("array3d 16 16 1"), kOom);
  EXPECT_EQ(child->Send("free 0"), "ok");  // cuArrayDestroy
  EXPECT_EQ(child->Send("array3d 16384 8192 2"), "ok 1");
  EXPECT_EQ(child->Send("alloc 1"), kOom);
}

TEST_F(MemcapPreloadTest, MipmappedArraysCountEveryLevel) {
  auto child = Start(Slice("a"), kCap);
  // FLOAT x 1: 16384 x 8192 = 512 MiB, its second level 8192 x 4096 = 128 MiB.
  EXPECT_EQ(child->Send("mipmap 16384 8192 2"), "ok 0");
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(kGiB - 640 * kMiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(child->Send("mipmap 16384 8192 2"), kOom);
  EXPECT_EQ(child->Send("free 0"), "ok");  // cuMipmappedArrayDestroy
  EXPECT_EQ(child->Send("alloc 1G"), "ok 1");
}

TEST_F(MemcapPreloadTest, PitchedAllocationsCountTheirPitch) {
  auto child = Start(Slice("a"), kCap);
  // The fake pads rows to 2048 bytes; the interposer reserves with 512 and corrects afterwards.
  EXPECT_EQ(child->Send("pitch 1000 1024"), "ok 0 2048");
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(kGiB - 2 * kMiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(child->Send("free 0"), "ok");
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(kGiB) + " " + std::to_string(kGiB));
}

TEST_F(MemcapPreloadTest, RtldNextIsResolvedRelativeToTheCaller) {
  // glibc answers RTLD_NEXT from the return address; the interposer's dlsym must keep the
  // caller's (a tail call), or this lookup from the program would skip the interposer itself.
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("nextdlsym"), "ok interposer");
  ChildProcess plain(kChild, {});
  EXPECT_EQ(plain.Send("nextdlsym"), "ok other");
}

// After exec the process is a new program: the old image's memory went with its address space,
// so its charge must too (it used to stay, refusing the new image's allocations below the cap).
TEST_F(MemcapPreloadTest, ExecStartsAFreshCharge) {
  std::string slice = Slice("a");
  auto child = Start(slice, kCap, {{kEnvContextBytes, std::to_string(100 * kMiB)}});
  EXPECT_EQ(child->Send("alloc 800M"), "ok 0");
  EXPECT_EQ(child->Send("exec"), "ok execd");
  EXPECT_EQ(child->Send("alloc 800M"), "ok 0") << "the old image's 800 MiB are not charged";
  EXPECT_EQ(child->Send("alloc 200M"), kOom) << "its context is charged once, not twice";
  Result<SliceUsage> usage = ReadSliceUsage(slice);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, 900 * kMiB);
  EXPECT_EQ(usage->processes, 1);
}

// A pool that keeps what is freed would hold memory the cap no longer counts: in a capped
// process the release threshold is lowered to 0 (the driver's default) whatever is asked.
TEST_F(MemcapPreloadTest, PoolReleaseThresholdIsLoweredInACappedProcess) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("poolthreshold 18446744073709551615"), "ok 0");
  ASSERT_EQ(child->Send("mode proc"), "ok");  // the runtime's way (cudaMemPoolSetAttribute)
  EXPECT_EQ(child->Send("poolthreshold 1048576"), "ok 0");
  ChildProcess plain(kChild, {});
  EXPECT_EQ(plain.Send("poolthreshold 18446744073709551615"), "ok 18446744073709551615");
}

// Graph memory nodes hold device memory when the graph runs: charged to the graph when added,
// refused past the cap before the driver sees them, given back when the graph is destroyed.
TEST_F(MemcapPreloadTest, GraphMemoryNodesAreChargedUntilTheGraphIsDestroyed) {
  auto child = Start(Slice("a"), kCap);
  EXPECT_EQ(child->Send("graphalloc 1 600M"), "ok 1");
  EXPECT_EQ(child->Send("alloc 600M"), kOom);
  EXPECT_EQ(child->Send("graphnode 1 100M"), "ok 2");  // cuGraphAddNode(_v2), CUDA 12.3 ABI
  EXPECT_EQ(child->Send("graphalloc 2 400M"), kOom);
  EXPECT_EQ(child->Send("graphnode 2 400M"), kOom);
  EXPECT_EQ(child->Send("graphalloc 2 300M"), "ok 3") << "the refused nodes never reached the driver";
  EXPECT_EQ(child->Send("graphdestroy 1"), "ok");
  EXPECT_EQ(child->Send("alloc 724M"), "ok 0") << "graph 1's 700 MiB are back; graph 2 holds 300 MiB";
  EXPECT_EQ(child->Send("alloc 1"), kOom);
  EXPECT_EQ(child->Send("graphdestroy 2"), "ok");
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(kGiB - 724 * kMiB) + " " + std::to_string(kGiB));
  ASSERT_EQ(child->Send("mode proc"), "ok");
  EXPECT_EQ(child->Send("graphnode 3 400M"), kOom) << "through cuGetProcAddress too";
}

// Every way a program can find the driver's entry points reaches the hooks.
class MemcapResolutionTest : public MemcapPreloadTest,
                             public ::testing::WithParamInterface<std::string> {};

TEST_P(MemcapResolutionTest, CapHoldsThroughEveryLookupPath) {
  auto child = Start(Slice("a"), kCap);
  ASSERT_EQ(child->Send("mode " + GetParam()), "ok");
  EXPECT_EQ(child->Send("alloc 768M"), "ok 0");
  EXPECT_EQ(child->Send("alloc 512M"), kOom);
  EXPECT_EQ(child->Send("async 512M"), kOom);
  EXPECT_EQ(child->Send("pool 512M"), kOom);
  EXPECT_EQ(child->Send("create 512M"), kOom);
  EXPECT_EQ(child->Send("array 16384 8192"), kOom);
  EXPECT_EQ(child->Send("info"), "ok " + std::to_string(256 * kMiB) + " " + std::to_string(kGiB));
  EXPECT_EQ(child->Send("totalmem"), "ok " + std::to_string(kGiB));
  EXPECT_EQ(child->Send("calls"), "ok 1 " + std::to_string(768 * kMiB));
  EXPECT_EQ(child->Send("free 0"), "ok");
  EXPECT_EQ(child->Send("async 1G"), "ok 1");
  EXPECT_EQ(child->Send("freeasync 1"), "ok");
  EXPECT_EQ(child->Send("pool 1G"), "ok 2");
}

INSTANTIATE_TEST_SUITE_P(Paths, MemcapResolutionTest,
                         ::testing::Values("direct", "dlsym", "proc", "procptsz", "proc1", "procnew",
                                           "next"));

// cuGetProcAddress gives the driver's internal entry points (not the exports): the hooks are
// still returned, chosen by name, and the driver's internal pointers are never called.
TEST_F(MemcapPreloadTest, ProcAddressHooksAreChosenByNameNotByAddress) {
  auto child = Start(Slice("a"), kCap);
  ASSERT_EQ(child->Send("mode proc"), "ok");
  EXPECT_EQ(child->Send("alloc 768M"), "ok 0");
  EXPECT_EQ(child->Send("mipmap 16384 8192 1"), kOom);
  EXPECT_EQ(child->Send("internal"), "ok 0") << "every call went through a hook";
  ChildProcess plain(kChild, {});
  ASSERT_EQ(plain.Send("mode proc"), "ok");
  EXPECT_EQ(plain.Send("alloc 1M"), "ok 0");
  EXPECT_EQ(plain.Send("internal"), "ok 1") << "without the interposer the internal pointer is used";
}

// A request at a version where the driver has a newer ABI of a hooked function (here
// cuMemAlloc at 90000) passes through: calling the hook with the old signature could crash.
// The other entry points, unchanged at that version, are still hooked.
TEST_F(MemcapPreloadTest, ANewerAbiThanTheHooksKnowPassesThrough) {
  auto child = Start(Slice("a"), kCap);
  ASSERT_EQ(child->Send("mode procfuture"), "ok");
  EXPECT_EQ(child->Send("alloc 768M"), "ok 0");
  EXPECT_EQ(child->Send("alloc 512M"), "ok 1") << "not capped: an ABI the interposer does not know";
  EXPECT_EQ(child->Send("async 1G"), "ok 2") << "known ABI at that version: capped, and the "
                                                  "uncapped bytes are not counted";
  EXPECT_EQ(child->Send("pool 1"), kOom);
  EXPECT_EQ(child->Send("internal"), "ok 4") << "the two allocations went to the newer entry point";
}

}  // namespace
}  // namespace gpuslice::memcap
