#include "api/http_budget.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gpuslice::api {
namespace {

int ShareOf(int total, int divisor) {
  if (total < 4) return 0;
  return std::max(1, total / divisor);
}

std::int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

HoldBudget::HoldBudget(std::string what, std::string flag_total, std::string flag_per_key, int total,
                       int per_key)
    : what_(std::move(what)),
      flag_total_(std::move(flag_total)),
      flag_per_key_(std::move(flag_per_key)),
      total_(total),
      per_key_(per_key),
      unix_reserve_(ShareOf(total, 4)),
      admin_reserve_(ShareOf(total, 16)) {}

int HoldBudget::held_by(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? 0 : it->second;
}

Result<Hold> HoldBudget::Take(std::string key, bool tcp, const std::function<bool()>& is_privileged,
                              int limit) {
  if (limit <= 0) limit = per_key_;
  if (held_ >= total_) {
    return ResourceExhausted(fmt::format("too many {}: the daemon holds its limit of {} ({}); try again later",
                                         what_, total_, flag_total_));
  }
  if (tcp && tcp_ >= total_ - unix_reserve_) {
    return ResourceExhausted(fmt::format(
        "too many {} over TCP: {} held, the limit is {} (the other {} of {} are kept for the Unix socket); "
        "try again later", what_, tcp_, total_ - unix_reserve_, unix_reserve_, flag_total_));
  }
  const int mine = held_by(key);
  if (mine >= limit) {
    return ResourceExhausted(fmt::format("too many {} for {}: {} held, the limit is {} ({})", what_, key, mine,
                                         limit, flag_per_key_));
  }
  Hold h{std::move(key), tcp, false};
  if (ordinary_ >= total_ - admin_reserve_) {
    // The ordinary share is full: only root and admins (on the Unix socket) go on.
    h.privileged = !tcp && is_privileged && is_privileged();
    if (!h.privileged) {
      return ResourceExhausted(fmt::format(
          "too many {}: {} held by ordinary callers, the limit is {} (the other {} of {} are kept for root and "
          "admins); try again later", what_, ordinary_, total_ - admin_reserve_, admin_reserve_, flag_total_));
    }
  }
  ++held_;
  if (tcp) ++tcp_;
  if (!h.privileged) ++ordinary_;
  ++by_key_[h.key];
  return h;
}

Status HoldBudget::Rekey(Hold& hold, std::string key, int limit) {
  if (key == hold.key) return Status::Ok();
  if (limit <= 0) limit = per_key_;
  const int mine = held_by(key);
  if (mine >= limit) {
    return ResourceExhausted(fmt::format("too many {} for {}: {} held, the limit is {} ({})", what_, key, mine,
                                         limit, flag_per_key_));
  }
  if (auto it = by_key_.find(hold.key); it != by_key_.end() && --it->second <= 0) by_key_.erase(it);
  ++by_key_[key];
  hold.key = std::move(key);
  return Status::Ok();
}

void HoldBudget::Release(const Hold& hold) {
  --held_;
  if (hold.tcp) --tcp_;
  if (!hold.privileged) --ordinary_;
  if (auto it = by_key_.find(hold.key); it != by_key_.end() && --it->second <= 0) by_key_.erase(it);
}

void RefusalLog::Note(const std::string& reason, const std::string& message) {
  const std::int64_t now = SteadyUs();
  std::int64_t suppressed = -1;
  {
    std::lock_guard lock(mu_);
    if (entries_.size() > 10000) entries_.clear();  // bounded, whatever the keys
    Entry& e = entries_[reason];
    if (e.window_start_us != 0 && now - e.window_start_us < kWindow) {
      ++e.suppressed;
      return;
    }
    suppressed = e.suppressed;
    e = Entry{now, 0};
  }
  if (suppressed > 0) {
    spdlog::warn("http: refused: {} (and {} more like it in the last {} s)", message, suppressed,
                 kWindow / kSecond);
  } else {
    spdlog::warn("http: refused: {}", message);
  }
}

}  // namespace gpuslice::api
