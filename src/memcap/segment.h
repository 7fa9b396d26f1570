#pragma once
// The shared accounting of one slice's memory cap, and the operations on it.
//
// One Segment lives in a POSIX shared-memory object per slice (see SegmentName in env.h) and is
// mapped by every process of the slice that uses CUDA, by libgpuslice-cuda.so, and read by the
// executor for `gpuslice show`. This header is used by both, so it has no STL and no exceptions.
//
// Invariants (hold whenever `mu` is not held by anyone):
//   used == sum over slots with pid != 0 of (committed + inflight)
//   0 <= committed, 0 <= inflight for every slot
// A slot belongs to one process (pid + start time); only that process changes its counters,
// except that any process may reclaim the slot of a dead one. Every change happens under the
// robust, process-shared mutex `mu`; a process that dies holding it leaves a half-done change
// that the next locker repairs by recomputing `used` from the slots (EOWNERDEAD).
//
// Reserve-then-commit: bytes are reserved (inflight) before the real driver allocation and moved
// to committed after it, or cancelled after a failure. If the process dies in between, its whole
// slot (inflight included) is reclaimed once its pid is seen dead, so a crash never leaks cap.
//
// Thread-safe and process-safe: every function takes the segment's mutex itself.

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace gpuslice::memcap {

inline constexpr std::uint64_t kSegmentMagic = 0x31636d656d6c7367ULL;  // "gslmemc1"
inline constexpr std::uint32_t kSegmentVersion = 1;
inline constexpr int kMaxSlots = 1024;

struct Slot {
  std::int32_t pid;          // 0 = free
  std::uint32_t reserved0;
  std::uint64_t start_time;  // /proc/<pid>/stat field 22 (clock ticks since boot); 0 = unknown
  std::int64_t committed;    // bytes the driver really allocated for this process
  std::int64_t inflight;     // bytes reserved for allocations not yet returned by the driver
};

struct Segment {
  std::uint64_t magic;       // kSegmentMagic once initialised
  std::uint32_t version;
  std::uint32_t slots_high;  // slots [0, slots_high) may be in use
  std::int64_t cap;          // bytes; set by the first process, authoritative for the slice
  std::int64_t used;         // see invariants
  pthread_mutex_t mu;        // PTHREAD_PROCESS_SHARED + PTHREAD_MUTEX_ROBUST
  Slot slots[kMaxSlots];
};

// Says whether the process (pid, start_time) still exists and may still hold GPU memory.
using AliveFn = bool (*)(std::int32_t pid, std::uint64_t start_time);

// Real liveness check: /proc/<pid>/stat exists, the process is not a zombie, and its start time
// matches (pid reuse). Processes in other pid namespaces look dead: keep a slice in one.
bool ProcessAlive(std::int32_t pid, std::uint64_t start_time);
// Start time of a process (field 22 of /proc/<pid>/stat), 0 when unreadable.
std::uint64_t ProcessStartTime(std::int32_t pid);

// Initialises a zeroed segment (mutex, magic, cap). Not thread-safe: call before sharing it
// (the interposer serialises initialisation with flock on the shm file descriptor).
bool InitSegment(Segment* seg, std::int64_t cap);

// Claims a slot for (pid, start_time), reusing a free or dead one. -1 when all are live. A
// process that already holds a slot gets it back emptied: that is a new program image after
// exec, whose predecessor's memory the driver freed with its address space.
int ClaimSlot(Segment* seg, std::int32_t pid, std::uint64_t start_time, AliveFn alive);
// Frees a slot at clean process exit; its bytes return to the slice.
void ReleaseSlot(Segment* seg, int slot, std::int32_t pid);

// The per-slot operations below take the caller's pid and do nothing when the slot no longer
// belongs to it (it was reclaimed, e.g. seen dead from another pid namespace), so a process can
// never change a neighbour's counters.
enum class ReserveResult { kOk, kOverCap, kNotOwner };
// Reserves `bytes` for `slot` if used + bytes <= cap, first reclaiming dead processes' slots when
// it would not fit. Changes nothing unless kOk.
ReserveResult Reserve(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes, AliveFn alive);
// After the real allocation: success moves the reservation to committed, failure cancels it.
void Commit(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes);
void Cancel(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes);
// A free: committed bytes go back to the slice (clamped so counters never go negative).
void Release(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes);
// Unconditional correction of committed bytes (e.g. pitch rounding learnt after the call).
void Adjust(Segment* seg, int slot, std::int32_t pid, std::int64_t delta);

struct Snapshot {
  std::int64_t cap;
  std::int64_t used;
  int processes;
};
// Reclaims dead slots (when `alive` is not null) and returns the slice's figures.
Snapshot Read(Segment* seg, AliveFn alive);

// Maps the slice's shared-memory object `name`, creating and initialising it with `cap` when
// `create`. Initialisation is serialised with flock() on the object, so a process that dies
// while initialising leaves it uninitialised (magic unset) for the next one to redo. A created
// object has mode 0600; with `create`, an object owned by another uid is refused (EACCES), so one
// user cannot plant a segment for another's slice. Returns nullptr with errno set on failure.
Segment* MapSegment(const char* name, std::int64_t cap, bool create);
void UnmapSegment(Segment* seg);

// Largest byte count ParseEnvBytes accepts (4 EiB): a cap, a context charge and an allocation
// added together can never overflow the int64 counters.
inline constexpr std::int64_t kMaxEnvBytes = std::int64_t{1} << 62;

// Parses a byte count from the environment (GPUSLICE_MEMCAP_BYTES,
// GPUSLICE_MEMCAP_CONTEXT_BYTES): decimal digits only, at most kMaxEnvBytes. False for anything
// else (null, empty, a sign, spaces, other characters, a larger value); *out is then unchanged.
bool ParseEnvBytes(const char* text, std::int64_t* out);

// Writes "/gpuslice-memcap-<sanitised key>[-<hash>]" into out (NUL-terminated). Returns false if
// out_len is too small (128 always suffices).
bool FormatSegmentName(const char* key, std::size_t key_len, char* out, std::size_t out_len);

}  // namespace gpuslice::memcap
