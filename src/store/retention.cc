#include "store/retention.h"

#include <spdlog/spdlog.h>

namespace gpuslice::store {

Result<RetentionStats> ApplyRetention(Store& store, const RetentionPolicy& policy, Micros now,
                                      int chunk, const std::function<bool()>& stop) {
  RetentionStats st;
  for (const RetentionTier& t : policy.tiers) {
    while (!(stop && stop())) {
      GPUSLICE_ASSIGN_OR_RETURN(std::int64_t n, store.CompactSamples(now - t.age, t.width, chunk));
      ++st.steps;
      st.folded += n;
      if (n == 0) break;
    }
  }
  while (policy.keep > 0 && !(stop && stop())) {
    GPUSLICE_ASSIGN_OR_RETURN(std::int64_t n, store.DropSamples(now - policy.keep, chunk));
    ++st.steps;
    st.dropped += n;
    if (n == 0) break;
  }
  // A page is 4 KiB: 256 pages (1 MiB) a step keeps each step short.
  while (!(stop && stop())) {
    GPUSLICE_ASSIGN_OR_RETURN(std::int64_t n, store.ReclaimSpace(256));
    ++st.steps;
    st.reclaimed_pages += n;
    if (n == 0) break;
  }
  return st;
}

RetentionWorker::RetentionWorker(Store& store, RetentionPolicy policy, std::function<Micros()> clock,
                                 std::chrono::milliseconds every, std::chrono::milliseconds pause)
    : store_(store), policy_(std::move(policy)), clock_(std::move(clock)), every_(every), pause_(pause) {}

RetentionWorker::~RetentionWorker() { Stop(); }

void RetentionWorker::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void RetentionWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RetentionWorker::Nudge() {
  {
    std::lock_guard lock(mu_);
    nudged_ = true;
  }
  cv_.notify_all();
}

void RetentionWorker::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    // Between steps: a short pause, and a way out when the daemon stops.
    auto stop = [this] {
      std::unique_lock l(mu_);
      return cv_.wait_for(l, pause_, [this] { return stop_; });
    };
    auto r = ApplyRetention(store_, policy_, clock_(), 2000, stop);
    if (!r.ok()) spdlog::warn("store retention: {}", r.status().ToString());
    passes_.fetch_add(1);
    lock.lock();
    cv_.wait_for(lock, every_, [this] { return stop_ || nudged_; });
    nudged_ = false;
  }
}

}  // namespace gpuslice::store
