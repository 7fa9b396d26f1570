#pragma once
// What one caller of the HTTP server may hold: connections and streaming answers, counted per
// identity (a uid on the Unix socket; on TCP the uid its bearer token acts as, and before a
// token has been seen one small bucket shared by every unauthenticated connection), with a
// share of the total that only the Unix socket may use and a further share that only root and
// admins may use. So nobody reachable over TCP can fill the daemon for the Unix socket, and no
// ordinary user can fill it for root. Refusals are logged, at most one line per reason per
// RefusalLog::kWindow with a count of those suppressed.
// Internal to the HTTP server (http_server.cc); exposed for its tests.
// HoldBudget: not thread-safe (the server guards each with its own lock or thread).
// RefusalLog: thread-safe.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::api {

// One thing held against a HoldBudget; given back with Release.
struct Hold {
  std::string key;          // "uid 1000", "token scraper", "tcp unauthenticated"
  bool tcp = false;         // counted in the TCP share
  bool privileged = false;  // counted in root's and admins' share
};

class HoldBudget {
 public:
  // `what` names the thing in messages ("connections", "streaming answers"); `flag_total` and
  // `flag_per_key` the serve flags that set the limits.
  HoldBudget(std::string what, std::string flag_total, std::string flag_per_key, int total,
             int per_key);

  // The share of the total kept from TCP (only the Unix socket may use it) and, inside what
  // remains, kept from callers who are not root or admins: total/4 and total/16 (each at least
  // 1 when the total allows it, none when it is below 4).
  int unix_reserve() const { return unix_reserve_; }
  int admin_reserve() const { return admin_reserve_; }

  // Takes one for `key`, or says why not (the message names the limit and its flag). `limit`
  // overrides the per-key limit (0: the default). `is_privileged` is asked only when the
  // ordinary share is full (it may look up groups).
  Result<Hold> Take(std::string key, bool tcp, const std::function<bool()>& is_privileged,
                    int limit = 0);
  // Moves a hold to another key (a TCP connection once its token is known), within that key's
  // limit; on refusal the hold is unchanged.
  Status Rekey(Hold& hold, std::string key, int limit = 0);
  void Release(const Hold& hold);

  int held() const { return held_; }
  int held_by(const std::string& key) const;

 private:
  std::string what_, flag_total_, flag_per_key_;
  int total_, per_key_, unix_reserve_, admin_reserve_;
  int held_ = 0;
  int tcp_ = 0;         // held by TCP callers
  int ordinary_ = 0;    // held outside root's and admins' share
  std::map<std::string, int> by_key_;
};

// Logs refusals without letting a flood of them flood the log: the first of each reason at
// once, then at most one line per window saying how many more there were.
class RefusalLog {
 public:
  static constexpr Micros kWindow = 10 * kSecond;
  // `reason`: a stable key ("connections uid 1000"); `message`: the line to log.
  void Note(const std::string& reason, const std::string& message);

 private:
  struct Entry {
    std::int64_t window_start_us = 0;
    std::int64_t suppressed = 0;
  };
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace gpuslice::api
