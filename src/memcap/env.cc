#include "memcap/env.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "memcap/segment.h"

namespace gpuslice::memcap {
namespace {

bool IsFile(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::string LibraryPath() {
  if (const char* env = std::getenv(kEnvLibrary); env != nullptr && env[0] != '\0') return env;
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path dir = exe.parent_path();
#ifndef GPUSLICE_INSTALL_LIBDIR
#define GPUSLICE_INSTALL_LIBDIR "lib"
#endif
    // The install layout: <prefix>/bin/gpuslice and <prefix>/<libdir>/gpuslice/ (libdir is
    // lib/<multiarch> on Debian); a staged GPU check's DIR/bin and DIR/lib/gpuslice; the build tree.
    for (const auto& candidate : {dir / ".." / GPUSLICE_INSTALL_LIBDIR / "gpuslice" / "libgpuslice-cuda.so",
                                  dir / ".." / "lib" / "gpuslice" / "libgpuslice-cuda.so",
                                  dir / ".." / ".." / "lib" / "libgpuslice-cuda.so"}) {
      if (IsFile(candidate)) return std::filesystem::weakly_canonical(candidate, ec).string();
    }
  }
#ifdef GPUSLICE_MEMCAP_BUILD_LIB
  if (IsFile(GPUSLICE_MEMCAP_BUILD_LIB)) return GPUSLICE_MEMCAP_BUILD_LIB;
#endif
  return "";
}

std::vector<std::pair<std::string, std::string>> SliceEnvironment(std::string_view slice_key,
                                                                  Bytes cap, Bytes context_bytes) {
  std::vector<std::pair<std::string, std::string>> env;
  if (cap <= 0) return env;
  if (std::string lib = LibraryPath(); !lib.empty()) env.emplace_back("LD_PRELOAD", lib);
  env.emplace_back(kEnvCapBytes, std::to_string(cap));
  env.emplace_back(kEnvSlice, std::string(slice_key));
  if (context_bytes > 0) env.emplace_back(kEnvContextBytes, std::to_string(context_bytes));
  return env;
}

std::string SegmentName(std::string_view slice_key) {
  char buf[128];
  bool ok = FormatSegmentName(slice_key.data(), slice_key.size(), buf, sizeof buf);
  (void)ok;  // 128 bytes always suffice (see segment.h)
  return buf;
}

Result<SliceUsage> ReadSliceUsage(std::string_view slice_key) {
  std::string name = SegmentName(slice_key);
  Segment* seg = MapSegment(name.c_str(), 0, /*create=*/false);
  if (seg == nullptr) {
    int err = errno;
    if (err == ENOENT) return NotFound("memcap segment '" + name + "' for slice '" +
                                       std::string(slice_key) + "' does not exist");
    return Unavailable("memcap segment '" + name + "': " + std::strerror(err));
  }
  Snapshot snap = Read(seg, &ProcessAlive);
  UnmapSegment(seg);
  return SliceUsage{snap.cap, snap.used, snap.processes};
}

Status RemoveSliceSegment(std::string_view slice_key) {
  std::string name = SegmentName(slice_key);
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return Unavailable("shm_unlink '" + name + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace gpuslice::memcap
