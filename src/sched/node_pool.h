#pragma once
// Internal to the scheduler: nodes of a node-based container (std::map, std::set,
// std::unordered_map) kept from erased entries for the next inserts. The scheduler's books
// mostly lose an entry and gain one per event (a job leaves the pending set and another
// enters, a device's free share moves in an index), so with a few nodes kept they allocate
// nothing in the steady state. Not thread-safe (a value owned with its containers).

#include <cstddef>
#include <utility>
#include <vector>

namespace gpuslice::sched {

template <typename Container, std::size_t kMaxKept = 4>
class NodePool {
 public:
  using Node = typename Container::node_type;
  using Key = typename Container::key_type;

  // c.erase(it), keeping the node.
  void Erase(Container& c, typename Container::const_iterator it) { Keep(c.extract(it)); }
  // c.erase(key), keeping the node; whether there was one.
  bool Erase(Container& c, const Key& key) {
    Node node = c.extract(key);
    const bool had = !node.empty();
    Keep(std::move(node));
    return had;
  }
  // c.insert(key) of a set, in a kept node if there is one.
  std::pair<typename Container::iterator, bool> Insert(Container& c, const Key& key) {
    if (nodes_.empty()) return c.insert(key);
    Node node = Take();
    node.value() = key;
    return Put(c, std::move(node));
  }
  // c.emplace(key, mapped) of a map (no effect if the key is there), in a kept node if any.
  template <typename Mapped>
  std::pair<typename Container::iterator, bool> Insert(Container& c, const Key& key, Mapped&& mapped) {
    if (nodes_.empty()) return c.emplace(key, std::forward<Mapped>(mapped));
    Node node = Take();
    node.key() = key;
    node.mapped() = std::forward<Mapped>(mapped);
    return Put(c, std::move(node));
  }
  // c.emplace_hint(hint, key, mapped) of an ordered map whose `key` is not there, in a kept
  // node if there is one.
  template <typename Mapped>
  typename Container::iterator InsertAt(Container& c, typename Container::const_iterator hint, const Key& key,
                                        Mapped&& mapped) {
    if (nodes_.empty()) return c.emplace_hint(hint, key, std::forward<Mapped>(mapped));
    Node node = Take();
    node.key() = key;
    node.mapped() = std::forward<Mapped>(mapped);
    return c.insert(hint, std::move(node));
  }

 private:
  void Keep(Node node) {
    if (node && nodes_.size() < kMaxKept) nodes_.push_back(std::move(node));
  }
  Node Take() {
    Node node = std::move(nodes_.back());
    nodes_.pop_back();
    return node;
  }
  std::pair<typename Container::iterator, bool> Put(Container& c, Node node) {
    auto result = c.insert(std::move(node));
    if (!result.inserted) Keep(std::move(result.node));
    return {result.position, result.inserted};
  }

  std::vector<Node> nodes_;
};

}  // namespace gpuslice::sched
