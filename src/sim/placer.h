#pragma once
// Filter + Score + select over a simulated Cluster with one placement plugin, for the simulator's
// hot loops. Same rules as sched::Place(): highest score wins; ties are broken uniformly at random
// with the context's RNG (reservoir sampling) or, without one, by the lowest node index.
// Speed-up: for policies whose score depends only on the node's state and the request
// (ScoreIsPure), each node's NodeChoice is cached per request class and node version, so a
// placement re-scores only the nodes that changed since that class was last placed; and what
// the policy computes of a node alone (PlacementPolicy::Prepare()) is kept per node version and
// shared by every request class scored on it (and what it computes of the workload alone,
// PrepareWorkload(), once). A changed node is scored only when its new state
// (everything a pure policy reads: model, CPU, memory, each GPU's free share, the kinds of pods
// it runs) is one that class has not been scored on yet: many nodes of a cluster are alike (of
// one type, filled by the same kinds of pod), and a pure score of equal states is equal.
// Not thread-safe; one per simulation.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/placement/placement.h"
#include "sim/cluster.h"

namespace gpuslice::sim {

// True for the policies known to draw nothing from ctx.rng and to read only the node's state
// and the request (all of fgd.cc except "random"), with or without an admission option
// ("gpuslice+keep-cpu", admission.h).
bool ScoreIsPure(std::string_view policy);

// How equal best scores are resolved.
enum class TieBreak {
  kRandom,        // uniformly at random (ctx.rng), as sched::Place() does with an RNG
  kLowestIndex,   // the first node in index order
  kArtifactOrder,  // the first in the order the FGD artifact's scheduler lists feasible nodes:
                   // Kubernetes 1.20's filter runs 16 workers over chunks of ~sqrt(n) consecutive
                   // nodes, so its list interleaves 16 chunks node by node (an earlier model of
                   // the artifact, kept for comparison; see docs/evaluation.md)
  kArtifactNames,  // the first in the artifact's node-name order: it renames every node
                   // "%04d-<name>" with a seeded random permutation before the run
                   // (simulator.go, syncClusterResourceList), so equal scores go to a random
                   // node priority that is fixed for the whole run; drawn from tie_rng at the
                   // first placement. This is what reproduces the published results.
};

// Rank of node i in the artifact's feasible-node order (lower comes first).
std::uint64_t ArtifactOrderRank(std::size_t i, std::size_t n);

struct Chosen {
  std::uint32_t node = 0;
  std::vector<int> gpus;
};

// A policy's result for one request class on one node state, as the Placer keeps it.
struct Scored {
  bool refused = false;
  double score = 0;
  std::uint64_t gpu_mask = 0;
};

// The Placer's scores of one request class, by node state id (dense, numbered from 0 in order
// of first sight): a direct index into the scores the class has met. One book per class keeps
// a placement's lookups (all of one class) in a few kilobytes; one hash table of every class's
// scores spread them over megabytes (gpuslice meets ~84k (class, state) pairs per run and looks
// them up ~260k times), and those lookups were the placer's slowest lines. Not thread-safe (a
// value).
class ClassScores {
 public:
  // The score of `state`; `added`: it was not there, and is now a Scored{} for the caller to
  // fill in. The reference is valid until the next Find() or clear().
  Scored& Find(std::uint32_t state, bool& added);
  std::size_t size() const { return scores_.size(); }
  // The states the book has a slot for (its direct index's length).
  std::size_t slots() const { return slot_.size(); }
  void clear();

 private:
  std::vector<std::uint32_t> slot_;  // [state id]: 1 + the index of its score in scores_; 0: none
  std::vector<Scored> scores_;
};

class Placer {
 public:
  // `tie_rng` drives kRandom (it may be ctx.rng).
  Placer(const sched::PlacementPolicy& policy, const sched::PlacementContext& ctx,
         TieBreak tie = TieBreak::kRandom, std::mt19937_64* tie_rng = nullptr);
  // `request_class`: a dense id equal for identical requests (>= 0), or -1 for "do not cache".
  std::optional<Chosen> Place(const Cluster& cluster, const sched::PlacementRequest& req, int request_class);
  std::uint64_t scored() const { return scored_; }
  // True iff the last Place() found a node the request fits on (Cluster::Fits), whether or not
  // the policy then took one: with nullopt from Place(), the policy refused it (an admission
  // rule, admission.h) rather than the cluster lacking room.
  bool last_fitted() const { return last_fitted_; }

 private:
  struct Entry {
    std::uint32_t version = 0;  // 0: empty
    bool refused = false;
    double score = 0;
    std::uint64_t gpu_mask = 0;
  };
  const sched::PlacementPolicy& policy_;
  sched::PlacementContext ctx_;
  std::unique_ptr<sched::WorkloadPrep> workload_prep_;  // of ctx_, for every Prepare()
  bool pure_;
  TieBreak tie_;
  std::mt19937_64* tie_rng_;
  std::vector<std::uint64_t> rank_;  // kArtifactOrder / kArtifactNames: rank per node
  std::vector<std::vector<Entry>> cache_;  // [request_class][node]
  struct Prepared {
    std::uint32_t version = 0;  // 0: none
    std::unique_ptr<sched::NodePrep> prep;
  };
  std::vector<Prepared> prepared_;  // [node], for the cached path
  // The cached path's node states: each node's state id as of its version, and the scores of
  // (request class, state) pairs. Ids number the distinct states in order of first sight, by
  // StateKey(); both books start over past kMaxScores scores or kMaxSlots slots of the classes'
  // books (the results are the same either way: a score is only looked up, never assumed), so a
  // long replay's memory stays bounded.
  std::uint32_t StateOf(const Cluster& cluster, std::size_t i);
  static void StateKey(const SimNode& n, std::string& key);
  struct NodeState {
    std::uint32_t version = 0;  // 0: not known
    std::uint32_t id = 0;
  };
  static constexpr std::size_t kMaxScores = std::size_t{1} << 20;
  static constexpr std::size_t kMaxSlots = std::size_t{1} << 24;  // 64 MiB
  std::vector<NodeState> node_state_;                    // [node]
  std::unordered_map<std::string, std::uint32_t> state_ids_;
  std::vector<ClassScores> scores_;                      // [request class], as many as cache_
  std::size_t scores_total_ = 0;                         // over every class
  std::size_t slots_total_ = 0;                          // ClassScores::slots() over every class
  std::string key_;                                      // StateKey()'s scratch
  std::uint64_t scored_ = 0;
  bool last_fitted_ = false;
};

}  // namespace gpuslice::sim
