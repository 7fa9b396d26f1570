#pragma once
// Executor-side view of libgpuslice-cuda, the memory-cap interposer preloaded into the
// processes of a `shared` slice (see docs/memcap.md).
//
// The executor asks SliceEnvironment() for the variables to add to a job's environment; the
// interposer reads them in every process of the job and enforces one cap per slice, accounted
// in a POSIX shared-memory segment named after the slice key. The executor removes that segment
// with RemoveSliceSegment() when the slice ends, and `gpuslice show` can report the slice's
// usage with ReadSliceUsage().
//
// Free functions only; all are thread-safe.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::memcap {

// Names of the variables the interposer reads. Any process may run without them: no cap
// variable (or 0) means the interposer passes every call straight through.
inline constexpr char kEnvLibrary[] = "GPUSLICE_CUDA_LIB";      // override of LibraryPath()
inline constexpr char kEnvCapBytes[] = "GPUSLICE_MEMCAP_BYTES";  // decimal bytes, > 0
inline constexpr char kEnvSlice[] = "GPUSLICE_SLICE";            // slice key -> segment name
// Bytes charged once per process for its CUDA context (a few hundred MiB on recent GPUs), which
// allocation hooks cannot see; set by SliceEnvironment() from the device's context reserve.
inline constexpr char kEnvContextBytes[] = "GPUSLICE_MEMCAP_CONTEXT_BYTES";

// Absolute path of libgpuslice-cuda.so, looked up in this order:
//   1. $GPUSLICE_CUDA_LIB when set and non-empty (returned as given, not checked);
//   2. next to the running binary: <exe dir>/../<libdir>/gpuslice/libgpuslice-cuda.so (install
//      layout, prefix/bin/gpuslice; libdir is lib/<multiarch> on Debian),
//      <exe dir>/../lib/gpuslice/libgpuslice-cuda.so (a staged GPU check, tests/gpu/stage.sh)
//      and <exe dir>/../../lib/libgpuslice-cuda.so (build tree, build/apps/gpuslice/gpuslice);
//   3. the path where this build tree put it (compiled in).
// The first existing file wins. Returns "" when none exists: the caller must then report the
// slice as "memory cap NOT enforced" rather than start the job silently without a cap.
std::string LibraryPath();

// Environment to add to every process of a `shared` slice:
//   LD_PRELOAD=<LibraryPath()>        (omitted when LibraryPath() is ""; the executor should
//                                      put it in front of a user's own LD_PRELOAD, ':'-joined,
//                                      and first check it with CheckInterposer(), check.h)
//   GPUSLICE_MEMCAP_BYTES=<cap>       (decimal bytes: what the slice holds on its device, its
//                                      processes' contexts included)
//   GPUSLICE_SLICE=<slice_key>
//   GPUSLICE_MEMCAP_CONTEXT_BYTES=<n> (only when context_bytes > 0)
// `cap` <= 0 means no cap: the list is then empty.
std::vector<std::pair<std::string, std::string>> SliceEnvironment(std::string_view slice_key,
                                                                  Bytes cap, Bytes context_bytes = 0);

// Name of the POSIX shared-memory object (for shm_open) holding the slice's accounting:
// "/gpuslice-memcap-<key>", with characters outside [A-Za-z0-9._-] replaced and a hash of the
// full key appended when anything was replaced or the key is long, so distinct keys never share
// a segment.
std::string SegmentName(std::string_view slice_key);

// Usage of one slice as seen in its segment (processes whose pid is dead are not counted).
struct SliceUsage {
  Bytes cap = 0;        // cap recorded by the first process of the slice
  Bytes used = 0;       // committed + in-flight bytes of live processes
  int processes = 0;    // live processes holding a slot
};

// Reads the slice's segment. kNotFound when no process of the slice has allocated yet.
Result<SliceUsage> ReadSliceUsage(std::string_view slice_key);

// Unlinks the slice's segment (call when the slice ends). Missing segment is OK.
Status RemoveSliceSegment(std::string_view slice_key);

}  // namespace gpuslice::memcap
