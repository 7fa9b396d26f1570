// GenericPlacement (the generic Filter/Score path) through its interface: shown only the hosts
// the capacity index says could take a request, it chooses, and draws from the RNG, as Place()
// over every host in NodeId order.
#include "sched/generic_placement.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "tests/sched/every_host.h"

namespace gpuslice::sched {
namespace {

using Devices = std::map<DeviceRef, DeviceView>;

Resolved Request(SliceKind kind, int gpus, MilliGpu milli, std::string model = "") {
  Resolved r;
  r.kind = kind;
  r.gpus = gpus;
  r.milli = milli;
  r.model = std::move(model);
  return r;
}

// Random hosts of one to four GPUs of two models, free, whole, shared or MPS, some draining,
// changed a host at a time (the index kept exact, as the scheduler keeps it); after each change
// a random request of each policy is placed by the part and by Place() over every host, each
// drawing from its own copy of one RNG.
TEST(GenericPlacement, ChoosesAndDrawsAsPlaceOverEveryHost) {
  constexpr std::uint32_t kHosts = 200;
  const std::vector<Resolved> requests = {
      Request(SliceKind::kWhole, 1, kOneGpu),  Request(SliceKind::kWhole, 2, kOneGpu),
      Request(SliceKind::kWhole, 4, kOneGpu),  Request(SliceKind::kShared, 1, 250),
      Request(SliceKind::kShared, 1, 750),     Request(SliceKind::kMps, 1, 500),
      Request(SliceKind::kWhole, 1, kOneGpu, "A100-80GB"), Request(SliceKind::kShared, 1, 500, "A100-80GB")};
  std::vector<std::unique_ptr<PlacementPolicy>> policies;
  for (std::string_view name : {"gpuslice", "fgd", "best-fit", "spread"}) policies.push_back(MakePolicy(name).value());
  WorkloadModel workload;
  workload.Count(1, 250);
  workload.Count(2, kOneGpu);
  std::mt19937_64 gen(11);
  Devices devices;
  CapacityIndex index;
  auto randomize = [&](DeviceView& d) { RandomizeDevice(gen, d, /*mps=*/true); };
  for (std::uint32_t h = 1; h <= kHosts; ++h) {
    const std::uint32_t n = 1 + static_cast<std::uint32_t>(gen() % 4);
    const std::string model = gen() % 3 == 0 ? "A100-80GB" : "H100-80GB";
    for (std::uint32_t i = 0; i < n; ++i) {
      const DeviceRef ref{NodeId(h), DeviceIndex(i)};
      DeviceView& d = devices[ref];
      d.ref = ref;
      d.model = model;
      randomize(d);
      index.Add(d, DeviceFacts{});
    }
    workload.HostResized(0, n);
  }
  GenericPlacement part;
  int placed = 0, tried = 0;
  for (int step = 0; step < 150; ++step) {
    const NodeId changed(1 + static_cast<std::uint32_t>(gen() % kHosts));
    for (auto it = devices.lower_bound({changed, DeviceIndex(0)}); it != devices.end() && it->first.node == changed;
         ++it) {
      index.Remove(it->second, DeviceFacts{});
      randomize(it->second);
      index.Add(it->second, DeviceFacts{});
    }
    const Resolved& r = requests[gen() % requests.size()];
    const PlacementPolicy& policy = *policies[static_cast<std::size_t>(step) % policies.size()];
    SCOPED_TRACE(testing::Message() << "step " << step << " policy " << policy.name());
    std::mt19937_64 rng_part(static_cast<std::uint64_t>(step));
    std::mt19937_64 rng_every = rng_part;
    const auto want = PlaceOverEveryHost(r, policy, devices, workload, rng_every);
    const auto got = part.Place(r, policy, index, devices, [&](const DeviceView& d) { return EveryHostView(r, d); },
                                workload, rng_part);
    EXPECT_EQ(rng_part(), rng_every()) << "the draws differ";
    ++tried;
    ASSERT_EQ(got.has_value(), want.has_value());
    if (!got) continue;
    ++placed;
    EXPECT_EQ(got->node, want->node);
    EXPECT_EQ(got->devices, want->devices);
  }
  EXPECT_GT(placed, tried / 2);
}

}  // namespace
}  // namespace gpuslice::sched
