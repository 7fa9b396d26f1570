#include "daemon/quotas.h"

#include <fmt/format.h>

namespace gpuslice::daemon {

Status UserQuotas::Validate() const {
  if (max_pending_jobs < 1 || max_pending_jobs > 1'000'000) {
    return InvalidArgument(fmt::format("--max-pending-per-user '{}': must be 1..1000000", max_pending_jobs));
  }
  if (max_env_bytes_per_job < 4 * kKiB || max_env_bytes_per_job > kMiB) {
    return InvalidArgument(fmt::format("--max-env-per-job '{}': must be 4KiB..1MiB (a job's argv and environment "
                                       "together are capped at 1MiB, below what execve accepts)",
                                       FormatBytes(max_env_bytes_per_job)));
  }
  if (max_submitted_bytes_per_user < kMiB || max_submitted_bytes_per_user > 1024 * kGiB) {
    return InvalidArgument(fmt::format("--max-submitted-per-user '{}': must be 1MiB..1TiB",
                                       FormatBytes(max_submitted_bytes_per_user)));
  }
  return Status::Ok();
}

Bytes UserLedger::EnvBytes(const store::JobRecord& j) {
  Bytes n = 0;
  for (const auto& [k, v] : j.env) n += static_cast<Bytes>(k.size() + v.size() + 2);
  return n;
}

Bytes UserLedger::SubmittedBytes(const store::JobRecord& j) {
  Bytes n = EnvBytes(j);
  for (const std::string& a : j.argv) n += static_cast<Bytes>(a.size() + 1);
  return n;
}

void UserLedger::Forget(JobId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  auto t = by_uid_.find(it->second.uid);
  if (t != by_uid_.end()) {
    t->second.pending -= it->second.pending ? 1 : 0;
    t->second.bytes -= it->second.bytes;
    if (t->second.pending <= 0 && t->second.bytes <= 0) by_uid_.erase(t);
  }
  entries_.erase(it);
}

void UserLedger::Record(const store::JobRecord& j) {
  Forget(j.id);
  if (store::IsTerminal(j.state)) return;
  Entry e{j.uid, j.state == store::JobState::kPending, SubmittedBytes(j)};
  Totals& t = by_uid_[e.uid];
  t.pending += e.pending ? 1 : 0;
  t.bytes += e.bytes;
  entries_[j.id] = e;
}

int UserLedger::pending(std::int64_t uid) const {
  auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? 0 : it->second.pending;
}

Bytes UserLedger::submitted_bytes(std::int64_t uid) const {
  auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? 0 : it->second.bytes;
}

Status UserLedger::Admit(const store::JobRecord& j, const UserQuotas& q) const {
  const Bytes env = EnvBytes(j);
  if (env > q.max_env_bytes_per_job) {
    return ResourceExhausted(fmt::format(
        "field 'env': {} of environment, more than the {} one job may carry (serve --max-env-per-job); "
        "submit with a smaller environment (e.g. env -i ... or unset large variables)",
        FormatBytes(env), FormatBytes(q.max_env_bytes_per_job)));
  }
  if (pending(j.uid) >= q.max_pending_jobs) {
    return ResourceExhausted(fmt::format(
        "user {} has {} pending jobs, the limit (serve --max-pending-per-user) is {}; wait for some to start "
        "or cancel some", j.user, pending(j.uid), q.max_pending_jobs));
  }
  const Bytes mine = submitted_bytes(j.uid);
  const Bytes add = SubmittedBytes(j);
  if (mine + add > q.max_submitted_bytes_per_user) {
    return ResourceExhausted(fmt::format(
        "user {}: unfinished jobs hold {} of argv and environment; this job's {} would pass the limit of {} "
        "(serve --max-submitted-per-user); wait for some to end or cancel some",
        j.user, FormatBytes(mine), FormatBytes(add), FormatBytes(q.max_submitted_bytes_per_user)));
  }
  return Status::Ok();
}

}  // namespace gpuslice::daemon
