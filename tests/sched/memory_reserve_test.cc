// Memory caps that add up on real hardware: the driver keeps part of every GPU and each process's
// CUDA context takes more that no allocation call shows. The scheduler cuts shares from what is
// left after the driver's part and books one context with every shared or MPS slice on top of the
// memory it asks for, so caps filled to the brim never need more than the card has (the neighbour
// would get a real out-of-memory error). The figures come with DeviceAdded (the daemon fills them
// from the driver, the catalogue or the config: MemoryReserveFor, tested here too).
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "sched/config.h"
#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;

constexpr Bytes kDriver = 768 * kMiB;
constexpr Bytes kContext = 512 * kMiB;

// One H200 with the given reserves, as the daemon announces it.
void AddH200(SchedHarness& h, Bytes driver, Bytes context) {
  DeviceAdded d;
  d.device = {NodeId(1), DeviceIndex(0)};
  d.uuid = "GPU-h200";
  d.model = "H200-141GB";
  d.reserved_memory = driver;
  d.context_reserve = context;
  h.Feed(d);
}

Bytes H200() { return (*FindModel("H200-141GB"))->memory; }

// The built-in queues without the per-user caps: one user fills the GPU.
Config Uncapped() {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.user_max_milli = q.user_max_jobs = 0;
  return c;
}

TEST(MemoryReserveTest, SharesAreCutFromWhatTheDriverLeaves) {
  SchedHarness h;
  AddH200(h, kDriver, kContext);
  const DeviceView& d = h.scheduler().devices().begin()->second;
  EXPECT_EQ(d.memory, H200() - kDriver);
  EXPECT_EQ(d.context_reserve, kContext);
  auto a = Only<StartSlice>(h.Submit("interactive kind=shared gpu=500m"));
  auto b = Only<StartSlice>(h.Submit("interactive kind=shared gpu=500m"));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  // Two half slices, contexts included, fill no more than the card's usable memory.
  EXPECT_EQ(a[0].memory_cap, (H200() - kDriver) / 2);
  EXPECT_LE(a[0].memory_cap + b[0].memory_cap, H200() - kDriver);
  EXPECT_EQ(h.violation(), "");
}

TEST(MemoryReserveTest, AskedMemoryGetsItsContextOnTop) {
  SchedHarness h(Uncapped());
  AddH200(h, kDriver, kContext);
  auto s = Only<StartSlice>(h.Submit("interactive kind=shared gpu=50m mem=10GiB"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].memory_cap, 10 * kGiB + kContext) << "what the job asked is what it can allocate";
  // 10 GiB jobs until the memory runs out: one context more each means fewer fit than 10 GiB
  // steps of the whole card would suggest (14), and never past the usable memory.
  int started = 1;
  for (int i = 0; i < 19; ++i) started += static_cast<int>(Only<StartSlice>(h.Submit("interactive kind=shared gpu=50m mem=10GiB")).size());
  EXPECT_EQ(started, static_cast<int>((H200() - kDriver) / (10 * kGiB + kContext)));
  EXPECT_LT(started, static_cast<int>(H200() / (10 * kGiB)));
  const DeviceView& d = h.scheduler().devices().begin()->second;
  EXPECT_LE(d.used_memory, d.memory);
  EXPECT_EQ(h.violation(), "");
}

TEST(MemoryReserveTest, MpsSlicesBookTheirContextToo) {
  SchedHarness h;
  AddH200(h, kDriver, kContext);
  auto s = Only<StartSlice>(h.Submit("interactive kind=mps gpu=100m mem=4GiB"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].memory_cap, 4 * kGiB + kContext);
}

TEST(MemoryReserveTest, ARequestLargerThanUsableMemoryLessOneContextNeverFits) {
  SchedHarness h;
  AddH200(h, kDriver, kContext);
  const Bytes most = H200() - kDriver - kContext;
  auto too_big = h.Submit(fmt::format("interactive kind=shared gpu=100m mem={}", most + kMiB));
  EXPECT_EQ(Only<Reject>(too_big).size(), 1u);
  EXPECT_EQ(Only<StartSlice>(h.Submit(fmt::format("interactive kind=shared gpu=100m mem={}", most))).size(), 1u);
}

TEST(MemoryReserveTest, WithoutReservesNothingChanges) {
  // The simulator announces none: shares are of the catalogue's whole figure, as before.
  SchedHarness h;
  h.AddHost("1xH200-141GB");
  auto s = Only<StartSlice>(h.Submit("interactive kind=shared gpu=50m mem=10GiB"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].memory_cap, 10 * kGiB);
  EXPECT_EQ(h.scheduler().devices().begin()->second.memory, H200());
}

TEST(MemoryReserveForTest, ConfigThenDriverThenCatalogue) {
  const DeviceModel* h200 = *FindModel("H200-141GB");
  const DeviceModel* a100 = *FindModel("A100-80GB");
  Config c = DefaultConfig();
  DeviceReserve cat = MemoryReserveFor(c, h200, std::nullopt);
  EXPECT_EQ(cat.driver_reserved, h200->driver_reserved);
  EXPECT_EQ(cat.context_reserve, h200->context_reserve);
  EXPECT_GT(cat.driver_reserved, 0);
  EXPECT_GT(cat.context_reserve, 0);
  EXPECT_EQ(cat.source, "catalogue");
  DeviceReserve drv = MemoryReserveFor(c, h200, 600 * kMiB);
  EXPECT_EQ(drv.driver_reserved, 600 * kMiB);
  EXPECT_EQ(drv.source, "driver/catalogue");
  c.memory.all.context_reserve = 300 * kMiB;
  c.memory.models["H200-141GB"].driver_reserved = 1 * kGiB;
  DeviceReserve conf = MemoryReserveFor(c, h200, 600 * kMiB);
  EXPECT_EQ(conf.driver_reserved, kGiB) << "the config's entry for the model wins over the driver";
  EXPECT_EQ(conf.context_reserve, 300 * kMiB);
  EXPECT_EQ(conf.source, "config");
  EXPECT_EQ(MemoryReserveFor(c, a100, std::nullopt).driver_reserved, a100->driver_reserved);
  EXPECT_EQ(MemoryReserveFor(c, a100, std::nullopt).context_reserve, 300 * kMiB);
  EXPECT_EQ(MemoryReserveFor(c, nullptr, kGiB).driver_reserved, 0) << "unknown model: nothing set aside";
}

TEST(MemoryReserveConfigTest, ParsedWithUnitsPerModelAndCheckedByName) {
  auto c = ParseConfig(R"(
[memory]
context_reserve = "384MiB"
[memory.models."NVIDIA H200"]
driver_reserved = "1GiB"
context_reserve = 0
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->memory.all.context_reserve, 384 * kMiB);
  EXPECT_FALSE(c->memory.all.driver_reserved.has_value());
  ASSERT_TRUE(c->memory.models.contains("H200-141GB")) << "an alias is stored under the canonical name";
  EXPECT_EQ(c->memory.models.at("H200-141GB").driver_reserved, kGiB);
  EXPECT_EQ(c->memory.models.at("H200-141GB").context_reserve, 0);

  auto bad_model = ParseConfig("[memory.models.Z80]\ndriver_reserved = \"1GiB\"\n", "t.toml");
  ASSERT_FALSE(bad_model.ok());
  EXPECT_THAT(bad_model.status().message(), HasSubstr("memory.models.Z80"));
  auto bad_value = ParseConfig("[memory]\ncontext_reserve = \"lots\"\n", "t.toml");
  ASSERT_FALSE(bad_value.ok());
  EXPECT_THAT(bad_value.status().message(), HasSubstr("memory.context_reserve = 'lots'"));
  auto huge = ParseConfig("[memory]\ndriver_reserved = \"1TiB\"\n", "t.toml");
  EXPECT_FALSE(huge.ok());
  auto unknown = ParseConfig("[memory]\nreserve = \"1GiB\"\n", "t.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("memory.reserve"));
}

}  // namespace
}  // namespace gpuslice::sched
