// Who an API caller is and what they may do: the Unix group check, the admin test (root or
// the config's admin group), a job's owner-or-admin check, and whoami. Caller identity itself
// comes from the socket's peer credentials (routes.cc) or the TCP token.
#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

bool InGroup(std::int64_t uid, std::int64_t gid, const std::string& group) {
  if (group.empty()) return false;
  struct group* g = getgrnam(group.c_str());
  if (g == nullptr) return false;
  if (static_cast<std::int64_t>(g->gr_gid) == gid) return true;
  struct passwd* pw = getpwuid(static_cast<uid_t>(uid));
  if (pw == nullptr) return false;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(pw->pw_name, static_cast<gid_t>(gid), groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    getgrouplist(pw->pw_name, static_cast<gid_t>(gid), groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(n));
  return std::find(groups.begin(), groups.end(), g->gr_gid) != groups.end();
}

Json Daemon::Impl::Whoami(const Caller& c) const {
  std::shared_lock lock(mu_);
  return Json{{"user", EscapeInvalidUtf8(UserName(c.uid))}, {"uid", c.uid}, {"admin", IsAdminLocked(c)},
              {"admin_group", config_.admin_group}, {"simulated", opt_.simulated}};
}

Status Daemon::Impl::Authorize(const Caller& c, JobId id) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  return AuthorizeLocked(c, it->second);
}

bool Daemon::Impl::IsAdmin(const Caller& c) const {
  std::shared_lock lock(mu_);
  return IsAdminLocked(c);
}

bool Daemon::Impl::IsAdminLocked(const Caller& c) const {
  return c.uid == 0 || InGroup(c.uid, c.gid, config_.admin_group);
}

Status Daemon::Impl::AuthorizeLocked(const Caller& c, const JobRecord& j) const {
  if (c.uid == j.uid || IsAdminLocked(c)) return Status::Ok();
  return PermissionDenied(fmt::format(
      "job {} belongs to {}; only its owner, root or a member of group '{}' may act on it",
      j.id.value(), j.user, config_.admin_group));
}

}  // namespace gpuslice::daemon
