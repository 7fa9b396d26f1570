#include "sim/placer.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "sched/placement/admission.h"
#include "sched/placement/fgd_frag.h"

namespace gpuslice::sim {

std::uint64_t ArtifactOrderRank(std::size_t i, std::size_t n) {
  // Kubernetes 1.20 parallelize.Until: 16 workers, chunk = min(floor(sqrt(n)), n / 16 + 1).
  constexpr std::size_t kWorkers = 16;
  std::size_t chunk = static_cast<std::size_t>(std::sqrt(static_cast<double>(n)));
  chunk = std::max<std::size_t>(1, std::min(chunk, n / kWorkers + 1));
  // Workers take chunks in order and advance in step, so nodes of 16 concurrent chunks
  // interleave: round (16 chunks), then offset within the chunk, then the chunk.
  const std::size_t c = i / chunk;
  return (static_cast<std::uint64_t>(c / kWorkers) << 40) | (static_cast<std::uint64_t>(i % chunk) << 20) |
         (c % kWorkers);
}

bool ScoreIsPure(std::string_view policy) {
  policy = sched::PlacementPart(policy);
  for (std::string_view p : {"dot-product", "gpu-clustering", "gpu-packing", "best-fit-fgd", "fgd", "gpuslice"}) {
    if (p == policy) return true;
  }
  return false;
}

Placer::Placer(const sched::PlacementPolicy& policy, const sched::PlacementContext& ctx, TieBreak tie,
               std::mt19937_64* tie_rng)
    : policy_(policy),
      ctx_(ctx),
      workload_prep_(policy.PrepareWorkload(ctx_)),
      pure_(ScoreIsPure(policy.name())),
      tie_(tie),
      tie_rng_(tie_rng) {}

void Placer::StateKey(const SimNode& n, std::string& key) {
  key.clear();
  auto put = [&key](auto v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(n.cpu_total);
  put(n.cpu_free);
  put(n.memory_total);
  put(n.memory_free);
  std::uint32_t kinds = 0;  // as Cluster::View() gives them
  for (std::size_t k = 0; k < n.kind_count.size(); ++k) {
    if (n.kind_count[k] > 0) kinds |= 1u << k;
  }
  put(kinds);
  put(n.gpus.size());
  for (const sched::GpuView& g : n.gpus) {
    put(g.free_milli);
    put(g.free_memory);
    put(g.usable);
  }
  key += n.model;  // last: the fixed-size fields before it delimit it
}

Scored& ClassScores::Find(std::uint32_t state, bool& added) {
  if (state >= slot_.size()) slot_.resize(std::max<std::size_t>(state + 1, 2 * slot_.size()), 0);
  std::uint32_t& slot = slot_[state];
  added = slot == 0;
  if (added) {
    scores_.emplace_back();
    slot = static_cast<std::uint32_t>(scores_.size());
  }
  return scores_[slot - 1];
}

void ClassScores::clear() {
  slot_.clear();
  scores_.clear();
}

std::uint32_t Placer::StateOf(const Cluster& cluster, std::size_t i) {
  if (node_state_.size() != cluster.size()) node_state_.assign(cluster.size(), NodeState{});
  NodeState& ns = node_state_[i];
  const SimNode& n = cluster.node(i);
  if (ns.version != n.version) {
    StateKey(n, key_);
    ns.id = state_ids_.try_emplace(key_, static_cast<std::uint32_t>(state_ids_.size())).first->second;
    ns.version = n.version;
  }
  return ns.id;
}

std::optional<Chosen> Placer::Place(const Cluster& cluster, const sched::PlacementRequest& req,
                                    int request_class) {
  const bool use_cache = pure_ && request_class >= 0;
  std::vector<Entry>* entries = nullptr;
  if (use_cache) {
    if (static_cast<std::size_t>(request_class) >= cache_.size()) {
      cache_.resize(request_class + 1);
      scores_.resize(request_class + 1);
    }
    entries = &cache_[request_class];
    if (entries->size() != cluster.size()) entries->assign(cluster.size(), Entry{});
  }
  std::optional<Chosen> best;
  double best_score = 0;
  std::uint64_t ties = 0;
  std::uint64_t best_rank = 0;
  const bool ranked = tie_ == TieBreak::kArtifactOrder || tie_ == TieBreak::kArtifactNames;
  if (ranked && rank_.size() != cluster.size()) {
    rank_.resize(cluster.size());
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      rank_[i] = tie_ == TieBreak::kArtifactOrder ? ArtifactOrderRank(i, cluster.size()) : i;
    }
    if (tie_ == TieBreak::kArtifactNames && tie_rng_ != nullptr) {
      // Fisher-Yates: node i gets prefix rank_[i], as rand.Perm hands out "%04d-" prefixes.
      for (std::size_t i = rank_.size(); i > 1; --i) {
        std::swap(rank_[i - 1], rank_[sched::UniformIndex(*tie_rng_, i)]);
      }
    }
  }
  std::vector<int> scratch;
  last_fitted_ = false;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (!cluster.Fits(req, i)) continue;
    last_fitted_ = true;
    double score = 0;
    const std::vector<int>* gpus = nullptr;
    std::optional<sched::NodeChoice> fresh;
    if (use_cache) {
      Entry& e = (*entries)[i];
      const std::uint32_t version = cluster.node(i).version;
      if (e.version != version) {
        if (scores_total_ >= kMaxScores || slots_total_ >= kMaxSlots) {
          for (ClassScores& book : scores_) book.clear();
          scores_total_ = 0;
          slots_total_ = 0;
          state_ids_.clear();
          node_state_.assign(cluster.size(), NodeState{});
        }
        ClassScores& book = scores_[request_class];
        const std::size_t slots = book.slots();
        bool added = false;
        Scored& sc = book.Find(StateOf(cluster, i), added);
        slots_total_ += book.slots() - slots;
        if (added) {
          ++scores_total_;
          const sched::NodeView view = cluster.View(i);
          if (prepared_.size() != cluster.size()) prepared_.resize(cluster.size());
          Prepared& p = prepared_[i];
          if (p.version != version) {
            p.prep = policy_.Prepare(view, ctx_, workload_prep_.get());
            p.version = version;
          }
          fresh = policy_.ScorePrepared(req, view, ctx_, p.prep.get());
          ++scored_;
          sc.refused = !fresh.has_value();
          if (fresh) {
            sc.score = fresh->score;
            for (int g : fresh->gpu_indices) sc.gpu_mask |= std::uint64_t{1} << g;
          }
        }
        e.version = version;
        e.refused = sc.refused;
        e.score = sc.score;
        e.gpu_mask = sc.gpu_mask;
      }
      if (e.refused) continue;
      score = e.score;
      if (best && score < best_score) continue;  // cheap reject before rebuilding indices
      scratch.clear();
      for (std::uint64_t m = e.gpu_mask; m != 0; m &= m - 1) scratch.push_back(std::countr_zero(m));
      gpus = &scratch;
    } else {
      fresh = policy_.Score(req, cluster.View(i), ctx_);
      ++scored_;
      if (!fresh) continue;
      score = fresh->score;
      gpus = &fresh->gpu_indices;
    }
    const std::uint64_t rank = ranked ? rank_[i] : 0;
    if (!best || score > best_score) {
      best = Chosen{static_cast<std::uint32_t>(i), *gpus};
      best_score = score;
      best_rank = rank;
      ties = 1;
    } else if (score == best_score) {
      ++ties;
      bool take = false;
      switch (tie_) {
        case TieBreak::kRandom:
          take = tie_rng_ != nullptr && sched::UniformIndex(*tie_rng_, ties) == 0;
          break;
        case TieBreak::kLowestIndex:
          break;
        case TieBreak::kArtifactOrder:
        case TieBreak::kArtifactNames:
          take = rank < best_rank;
          break;
      }
      if (take) {
        best = Chosen{static_cast<std::uint32_t>(i), *gpus};
        best_rank = rank;
      }
    }
  }
  return best;
}

}  // namespace gpuslice::sim
