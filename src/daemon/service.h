#pragma once
// How `gpuslice serve` talks to systemd when it runs as gpuslice.service
// (packaging/systemd/gpuslice.service.in), without libsystemd:
//  - readiness and reloads through the sd_notify protocol: one datagram of newline-separated
//    KEY=VALUE lines ("READY=1", "RELOADING=1", "STOPPING=1", "STATUS=...") to the AF_UNIX
//    socket named by $NOTIFY_SOCKET (a leading '@' is the abstract namespace). Without that
//    variable nothing is sent. systemd reads the sender's pid from the datagram's credentials,
//    so the daemon's main thread or any of its threads may send (NotifyAccess=main);
//  - log lines with their syslog priority ("<3>error ...") and no timestamp when the log (spdlog's
//    default logger writes to stdout) is the journal ($JOURNAL_STREAM names its device and inode), so `journalctl -p err -u
//    gpuslice` filters by level and time is not written twice.
// Free functions; thread-safe (each call opens and closes its own socket) after
// AdoptNotifySocket.

#include <string>
#include <string_view>

#include "core/status.h"

namespace gpuslice::daemon {

// Takes $NOTIFY_SOCKET for NotifyService and removes it from the environment, so that no job
// (nor anything else the daemon starts) can speak to systemd for the daemon. Call once, at
// start, before any thread exists.
void AdoptNotifySocket();

// Sends `state` ("READY=1\nSTATUS=serving") to the socket AdoptNotifySocket took. OK when there
// was none (not under systemd); an error names the socket when the datagram was not sent.
Status NotifyService(std::string_view state);

// The same to an explicit socket path (tests; "@name" is abstract).
Status NotifySocket(const std::string& socket, std::string_view state);

// Whether stdout, where spdlog logs, is the journal ($JOURNAL_STREAM = "<device>:<inode>").
bool LogIsJournal();

// Sets spdlog's pattern for serve: with syslog priority prefixes and no timestamp when stderr
// is the journal, else "2026-12-03T10:00:00.000 info message".
void ConfigureServeLogging();

}  // namespace gpuslice::daemon
