#pragma once
// Whether libgpuslice-cuda can hold a slice's memory cap on this host: the library is there, and
// the dynamic linker of the C library here can load it. A slice whose cap the interposer must
// hold is not started when it cannot (the daemon says why in the job's log and in `show`), rather
// than run without its cap. `gpuslice doctor` reports the same facts (CheckInterposer, plus
// daemon/cap_mechanism.h for the mechanism per GPU).
//
// Free functions; thread-safe (they only read files).

#include <string>
#include <string_view>

#include "core/status.h"
#include "memcap/env.h"

namespace gpuslice::memcap {

// The newest GLIBC_x.y[.z] version the ELF shared object at `path` asks of the C library (its
// .gnu.version_r entries), as "x.y[.z]"; "" when it asks for none. NotFound when the file is
// missing, InvalidArgument (naming the path) when it is not a 64-bit ELF file or its version
// tables are malformed. GLIBC_PRIVATE is not a release and is ignored.
Result<std::string> RequiredGlibc(const std::string& path);

// <0, 0, >0 as dotted numeric versions compare ("2.9" < "2.12" < "2.34"; missing parts are 0).
int CompareVersions(std::string_view a, std::string_view b);

// The C library's version on this host ("2.36"), or "" when it is not glibc.
std::string HostGlibc();

struct InterposerCheck {
  std::string path;            // as looked up (LibraryPath()); "" when none was found
  std::string required_glibc;  // RequiredGlibc(path), when read
  std::string host_glibc;
  bool usable = false;
  std::string problem;         // for people, when !usable: what is wrong and what to do
};

// Checks the interposer at `path` (default: LibraryPath()) against the host's glibc (default:
// HostGlibc(); a non-glibc host is not judged on versions).
InterposerCheck CheckInterposer(std::string path = LibraryPath(), std::string host_glibc = HostGlibc());

}  // namespace gpuslice::memcap
