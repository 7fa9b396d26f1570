// NodePool: erasing and inserting through it leaves a container exactly as the plain calls do.
#include "sched/node_pool.h"

#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

TEST(NodePool, ContainersEndAsWithPlainEraseAndInsert) {
  std::mt19937_64 rng(3);
  std::map<int, std::string> map, map_ref;
  std::set<int> set, set_ref;
  std::unordered_map<int, std::string> hash, hash_ref;
  NodePool<std::map<int, std::string>, 3> map_nodes;
  NodePool<std::set<int>> set_nodes;
  NodePool<std::unordered_map<int, std::string>, 2> hash_nodes;
  for (int i = 0; i < 5000; ++i) {
    const int key = static_cast<int>(rng() % 40);
    const std::string value = "value number " + std::to_string(rng() % 1000);  // not inline
    if (rng() % 2 == 0) {
      EXPECT_EQ(map_nodes.Insert(map, key, value).second, map_ref.emplace(key, value).second);
      EXPECT_EQ(set_nodes.Insert(set, key).second, set_ref.insert(key).second);
      EXPECT_EQ(hash_nodes.Insert(hash, key, value).second, hash_ref.emplace(key, value).second);
      EXPECT_EQ(map.at(key), map_ref.at(key));
    } else if (rng() % 2 == 0) {
      EXPECT_EQ(map_nodes.Erase(map, key), map_ref.erase(key) == 1);
      EXPECT_EQ(set_nodes.Erase(set, key), set_ref.erase(key) == 1);
      EXPECT_EQ(hash_nodes.Erase(hash, key), hash_ref.erase(key) == 1);
    } else if (rng() % 2 == 0) {
      if (auto at = map.lower_bound(key); at == map.end() || at->first != key) {
        EXPECT_EQ(map_nodes.InsertAt(map, at, key, value)->second, value);
        map_ref.emplace(key, value);
      }
    } else if (auto it = map.find(key); it != map.end()) {
      map_nodes.Erase(map, it);
      map_ref.erase(key);
    }
    ASSERT_EQ(map, map_ref) << "step " << i;
    ASSERT_EQ(set, set_ref) << "step " << i;
    ASSERT_EQ(hash, hash_ref) << "step " << i;
  }
}

}  // namespace
}  // namespace gpuslice::sched
