#include "api/tokens.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice::api {
namespace {

constexpr size_t kMinToken = 16;
constexpr size_t kMaxToken = 256;
constexpr size_t kMaxFile = 1 << 20;

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ParseId(std::string_view s, std::int64_t* out) {
  std::int64_t v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  // (uid_t)-1 means "no change" to setuid(); 2^31 and above are not real ids either.
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 0x7fffffff) return false;
  *out = v;
  return true;
}

Status CheckToken(std::string_view token, const std::string& where) {
  if (token.size() < kMinToken || token.size() > kMaxToken) {
    return InvalidArgument(fmt::format("{}: the token has {} characters; {}..{} are needed", where,
                                       token.size(), kMinToken, kMaxToken));
  }
  for (char c : token) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return InvalidArgument(fmt::format(
          "{}: the token holds a character that is not printable ASCII", where));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<TcpIdentity>> ParseTokenFile(std::string_view text, const std::string& path,
                                                std::int64_t owner_uid, std::int64_t owner_gid) {
  const std::string shown = EscapeInvalidUtf8(path);
  std::vector<TcpIdentity> out;
  std::vector<std::string_view> bare;
  std::set<std::string> names;
  std::set<std::string_view> tokens;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() + 1 : eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    auto f = Fields(line);
    if (f.empty()) continue;
    const std::string where = fmt::format("--token-file '{}' line {}", shown, line_no);
    if (f.size() == 1) {
      GPUSLICE_RETURN_IF_ERROR(CheckToken(f[0], where));
      bare.push_back(f[0]);
      continue;
    }
    if (f.size() != 3) {
      return InvalidArgument(fmt::format("{}: expected 'NAME UID[:GID] TOKEN' (or 'NAME "
                                         "read-only TOKEN'), found {} fields", where, f.size()));
    }
    TcpIdentity id;
    id.name = std::string(f[0]);
    for (char c : id.name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
        return InvalidArgument(fmt::format("{}: name '{}': only letters, digits, '_', '-', '.'",
                                           where, EscapeInvalidUtf8(id.name)));
      }
    }
    if (id.name.size() > 64) {
      return InvalidArgument(fmt::format("{}: name longer than 64 characters", where));
    }
    if (!names.insert(id.name).second) {
      return InvalidArgument(fmt::format("{}: name '{}' given twice", where, id.name));
    }
    std::string_view ids = f[1];
    if (ids == "read-only") {
      id.read_only = true;
    } else {
      size_t colon = ids.find(':');
      if (!ParseId(ids.substr(0, colon), &id.uid)) {
        return InvalidArgument(fmt::format("{}: uid '{}': expected a number 0..2147483647 or "
                                           "'read-only'", where, EscapeInvalidUtf8(ids)));
      }
      passwd* pw = getpwuid(static_cast<uid_t>(id.uid));
      if (colon != std::string_view::npos) {
        if (!ParseId(ids.substr(colon + 1), &id.gid)) {
          return InvalidArgument(fmt::format("{}: gid '{}': expected a number 0..2147483647",
                                             where, EscapeInvalidUtf8(ids.substr(colon + 1))));
        }
      } else if (pw != nullptr) {
        id.gid = pw->pw_gid;
      } else {
        return InvalidArgument(fmt::format(
            "{}: uid {} is not in the passwd database; give its group as {}:GID", where, id.uid,
            id.uid));
      }
      // A name that is a user must be that user: catches a typo in the uid.
      if (passwd* named = getpwnam(id.name.c_str());
          named != nullptr && static_cast<std::int64_t>(named->pw_uid) != id.uid) {
        return InvalidArgument(fmt::format("{}: '{}' is uid {} in the passwd database, not {}",
                                           where, id.name, named->pw_uid, id.uid));
      }
      // Whoever can edit the file can become any uid it names.
      if (owner_uid != 0 && id.uid != owner_uid) {
        return InvalidArgument(fmt::format(
            "{}: maps to uid {}, but the file belongs to uid {}; only a root-owned token file "
            "may map tokens to other users", where, id.uid, owner_uid));
      }
    }
    GPUSLICE_RETURN_IF_ERROR(CheckToken(f[2], where));
    if (!tokens.insert(f[2]).second) {
      return InvalidArgument(fmt::format("{}: this token is already used on an earlier line",
                                         where));
    }
    id.token = std::string(f[2]);
    out.push_back(std::move(id));
  }
  if (!bare.empty()) {
    if (bare.size() > 1 || !out.empty()) {
      return InvalidArgument(fmt::format("--token-file '{}': a line with only a token is the old "
                                         "one-token format; with several lines write 'NAME "
                                         "UID[:GID] TOKEN' on each", shown));
    }
    if (owner_uid == 0) {
      return InvalidArgument(fmt::format(
          "--token-file '{}': a bare token in a root-owned file would make every TCP client "
          "root; write 'NAME UID[:GID] TOKEN' lines instead (e.g. 'alice 1000 TOKEN', or "
          "'root 0 TOKEN' to mean root; see docs/api.md)", shown));
    }
    TcpIdentity id;
    passwd* pw = getpwuid(static_cast<uid_t>(owner_uid));
    id.name = pw != nullptr ? pw->pw_name : fmt::format("uid{}", owner_uid);
    id.uid = owner_uid;
    id.gid = owner_gid;
    id.token = std::string(bare[0]);
    out.push_back(std::move(id));
  }
  if (out.empty()) {
    return InvalidArgument(fmt::format("--token-file '{}': no token in it", shown));
  }
  return out;
}

Result<std::vector<TcpIdentity>> LoadTokenFile(const std::string& path) {
  const std::string shown = EscapeInvalidUtf8(path);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    return InvalidArgument(fmt::format("--token-file '{}': {}", shown, std::strerror(errno)));
  }
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return InvalidArgument(fmt::format("--token-file '{}': not a regular file", shown));
  }
  if (sb.st_mode & (S_IRWXO | S_IWGRP | S_IRGRP)) {
    close(fd);
    return InvalidArgument(fmt::format(
        "--token-file '{}': mode {:04o} lets group or others read or change it (chmod 600 it)",
        shown, sb.st_mode & 07777));
  }
  if (sb.st_size > static_cast<off_t>(kMaxFile)) {
    close(fd);
    return InvalidArgument(fmt::format("--token-file '{}': larger than {} bytes", shown, kMaxFile));
  }
  std::string text(static_cast<size_t>(sb.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  return ParseTokenFile(text, path, sb.st_uid, sb.st_gid);
}

}  // namespace gpuslice::api
