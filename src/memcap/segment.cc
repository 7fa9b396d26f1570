// Shared accounting of a slice's memory cap. See segment.h for the invariants.
// No STL and no exceptions: this file is also linked into libgpuslice-cuda.so, which is preloaded
// into arbitrary processes.

#include "memcap/segment.h"

#include "memcap/glibc_compat.h"  // first: binds libc references to old versions (interposer)

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gpuslice::memcap {
namespace {

// Locks the segment; if the previous owner died holding the lock, its change may be half-done,
// so `used` is recomputed from the slots (the source of truth) before marking it consistent.
class SegmentLock {
 public:
  explicit SegmentLock(Segment* seg) : seg_(seg) {
    int rc = pthread_mutex_lock(&seg_->mu);
    if (rc == EOWNERDEAD) {
      RecomputeUsed();
      pthread_mutex_consistent(&seg_->mu);
    }
  }
  ~SegmentLock() { pthread_mutex_unlock(&seg_->mu); }
  SegmentLock(const SegmentLock&) = delete;
  SegmentLock& operator=(const SegmentLock&) = delete;

 private:
  void RecomputeUsed() {
    std::int64_t used = 0;
    for (std::uint32_t i = 0; i < seg_->slots_high && i < kMaxSlots; ++i) {
      Slot& s = seg_->slots[i];
      if (s.pid == 0) continue;
      if (s.committed < 0) s.committed = 0;
      if (s.inflight < 0) s.inflight = 0;
      used += s.committed + s.inflight;
    }
    seg_->used = used;
  }
  Segment* seg_;
};

void ClearSlotLocked(Segment* seg, Slot& s) {
  if (s.pid == 0) return;
  seg->used -= s.committed + s.inflight;
  if (seg->used < 0) seg->used = 0;
  s.committed = 0;
  s.inflight = 0;
  s.start_time = 0;
  s.pid = 0;  // last: the slot is free only once its bytes are gone
}

// Returns the number of live slots after clearing the dead ones.
int ReclaimDeadLocked(Segment* seg, AliveFn alive) {
  int live = 0;
  for (std::uint32_t i = 0; i < seg->slots_high && i < kMaxSlots; ++i) {
    Slot& s = seg->slots[i];
    if (s.pid == 0) continue;
    if (alive != nullptr && !alive(s.pid, s.start_time)) {
      ClearSlotLocked(seg, s);
    } else {
      ++live;
    }
  }
  return live;
}

bool ValidSlot(const Segment* seg, int slot) { return slot >= 0 && slot < kMaxSlots && seg != nullptr; }
bool OwnsLocked(const Segment* seg, int slot, std::int32_t pid) { return seg->slots[slot].pid == pid; }

// Reads /proc/<pid>/stat; returns false if unreadable. Fills state and start time (field 22).
bool ReadStat(std::int32_t pid, char* state, std::uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and ')': fields restart after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] == '\0') return false;
  p += 2;  // now at field 3 (state)
  *state = *p;
  // Skip to field 22: 19 more space-separated fields after the state.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  std::uint64_t v = 0;
  while (*p >= '0' && *p <= '9') v = v * 10 + static_cast<std::uint64_t>(*p++ - '0');
  *start_time = v;
  return true;
}

}  // namespace

std::uint64_t ProcessStartTime(std::int32_t pid) {
  char state = 0;
  std::uint64_t start = 0;
  return ReadStat(pid, &state, &start) ? start : 0;
}

bool ProcessAlive(std::int32_t pid, std::uint64_t start_time) {
  if (pid <= 0) return false;
  char state = 0;
  std::uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) return false;
  // A zombie (or dead) process has released its GPU memory already.
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  return start_time == 0 || start == start_time;
}

bool InitSegment(Segment* seg, std::int64_t cap) {
  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) return false;
  bool ok = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) == 0 &&
            pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) == 0 &&
            pthread_mutex_init(&seg->mu, &attr) == 0;
  pthread_mutexattr_destroy(&attr);
  if (!ok) return false;
  seg->version = kSegmentVersion;
  seg->slots_high = 0;
  seg->cap = cap;
  seg->used = 0;
  __atomic_store_n(&seg->magic, kSegmentMagic, __ATOMIC_RELEASE);
  return true;
}

int ClaimSlot(Segment* seg, std::int32_t pid, std::uint64_t start_time, AliveFn alive) {
  SegmentLock lock(seg);
  int free_slot = -1;
  for (std::uint32_t i = 0; i < seg->slots_high && i < kMaxSlots; ++i) {
    Slot& s = seg->slots[i];
    if (s.pid == pid && s.start_time == start_time) {
      // The same process claims again: a running program image claims once, so this is a new
      // image after exec. The old image's device memory went with its address space (its CUDA
      // context with it): the slot starts empty instead of inheriting a charge nobody can free.
      seg->used -= s.committed + s.inflight;
      if (seg->used < 0) seg->used = 0;
      s.committed = 0;
      s.inflight = 0;
      return static_cast<int>(i);
    }
    if (free_slot < 0 && s.pid == 0) free_slot = static_cast<int>(i);
  }
  if (free_slot < 0 && seg->slots_high < static_cast<std::uint32_t>(kMaxSlots)) {
    free_slot = static_cast<int>(seg->slots_high++);
  }
  if (free_slot < 0) {
    ReclaimDeadLocked(seg, alive);
    for (std::uint32_t i = 0; i < seg->slots_high; ++i) {
      if (seg->slots[i].pid == 0) {
        free_slot = static_cast<int>(i);
        break;
      }
    }
    if (free_slot < 0) return -1;
  }
  Slot& s = seg->slots[free_slot];
  s.committed = 0;
  s.inflight = 0;
  s.start_time = start_time;
  s.pid = pid;
  return free_slot;
}

void ReleaseSlot(Segment* seg, int slot, std::int32_t pid) {
  if (!ValidSlot(seg, slot)) return;
  SegmentLock lock(seg);
  if (OwnsLocked(seg, slot, pid)) ClearSlotLocked(seg, seg->slots[slot]);
}

ReserveResult Reserve(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes, AliveFn alive) {
  if (!ValidSlot(seg, slot)) return ReserveResult::kNotOwner;
  if (bytes < 0) return ReserveResult::kOverCap;
  SegmentLock lock(seg);
  if (!OwnsLocked(seg, slot, pid)) return ReserveResult::kNotOwner;
  if (bytes > seg->cap - seg->used) {
    // Only on the slow path: a dead neighbour's bytes may be what stands in the way.
    ReclaimDeadLocked(seg, alive);
    if (bytes > seg->cap - seg->used) return ReserveResult::kOverCap;
  }
  seg->used += bytes;
  seg->slots[slot].inflight += bytes;
  return ReserveResult::kOk;
}

void Commit(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes) {
  if (!ValidSlot(seg, slot)) return;
  SegmentLock lock(seg);
  if (!OwnsLocked(seg, slot, pid)) return;
  Slot& s = seg->slots[slot];
  s.inflight -= bytes;
  s.committed += bytes;
}

void Cancel(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes) {
  if (!ValidSlot(seg, slot)) return;
  SegmentLock lock(seg);
  if (!OwnsLocked(seg, slot, pid)) return;
  Slot& s = seg->slots[slot];
  if (bytes > s.inflight) bytes = s.inflight;
  s.inflight -= bytes;
  seg->used -= bytes;
}

void Release(Segment* seg, int slot, std::int32_t pid, std::int64_t bytes) {
  if (!ValidSlot(seg, slot)) return;
  SegmentLock lock(seg);
  if (!OwnsLocked(seg, slot, pid)) return;
  Slot& s = seg->slots[slot];
  if (bytes > s.committed) bytes = s.committed;
  s.committed -= bytes;
  seg->used -= bytes;
}

void Adjust(Segment* seg, int slot, std::int32_t pid, std::int64_t delta) {
  if (!ValidSlot(seg, slot)) return;
  SegmentLock lock(seg);
  if (!OwnsLocked(seg, slot, pid)) return;
  Slot& s = seg->slots[slot];
  if (s.committed + delta < 0) delta = -s.committed;
  s.committed += delta;
  seg->used += delta;
}

Snapshot Read(Segment* seg, AliveFn alive) {
  SegmentLock lock(seg);
  int live = ReclaimDeadLocked(seg, alive);
  return Snapshot{seg->cap, seg->used, live};
}

Segment* MapSegment(const char* name, std::int64_t cap, bool create) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return nullptr;
  Segment* seg = nullptr;
  struct stat st;
  int saved_errno = 0;
  // The raw system call, not fstat(): glibc's fstat is versioned GLIBC_2.33, which an older
  // glibc could not load the interposer with (glibc_compat.h). The kernel's struct stat is
  // glibc's on x86-64 and aarch64.
  if (flock(fd, LOCK_EX) != 0 || syscall(SYS_fstat, fd, &st) != 0) {
    saved_errno = errno;
  } else if (create && st.st_uid != geteuid()) {
    saved_errno = EACCES;
  } else if (static_cast<std::size_t>(st.st_size) < sizeof(Segment) && !create) {
    saved_errno = ENOENT;  // never initialised
  } else if (static_cast<std::size_t>(st.st_size) < sizeof(Segment) &&
             ftruncate(fd, sizeof(Segment)) != 0) {
    saved_errno = errno;
  } else {
    void* p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      saved_errno = errno;
    } else {
      seg = static_cast<Segment*>(p);
      bool ready = __atomic_load_n(&seg->magic, __ATOMIC_ACQUIRE) == kSegmentMagic &&
                   seg->version == kSegmentVersion;
      // Holding the flock, nobody else is initialising: an unset magic means a creator died
      // part-way (or nobody started), and nobody can have used the segment yet.
      if (!ready && (!create || !InitSegment(seg, cap))) {
        saved_errno = create ? EIO : ENOENT;
        munmap(p, sizeof(Segment));
        seg = nullptr;
      }
    }
  }
  flock(fd, LOCK_UN);
  close(fd);
  if (seg == nullptr) errno = saved_errno;
  return seg;
}

void UnmapSegment(Segment* seg) {
  if (seg != nullptr) munmap(seg, sizeof(Segment));
}

bool ParseEnvBytes(const char* text, std::int64_t* out) {
  if (text == nullptr || text[0] == '\0') return false;
  std::int64_t v = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    const int digit = *p - '0';
    if (v > (kMaxEnvBytes - digit) / 10) return false;  // before the multiply: no overflow
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

bool FormatSegmentName(const char* key, std::size_t key_len, char* out, std::size_t out_len) {
  static constexpr char kPrefix[] = "/gpuslice-memcap-";
  static constexpr std::size_t kMaxKeyChars = 64;
  std::size_t prefix_len = sizeof kPrefix - 1;
  if (out_len < prefix_len + kMaxKeyChars + 1 + 16 + 1) return false;
  std::memcpy(out, kPrefix, prefix_len);
  std::size_t pos = prefix_len;
  bool altered = key_len > kMaxKeyChars || key_len == 0;
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the full key
  for (std::size_t i = 0; i < key_len; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    hash = (hash ^ c) * 1099511628211ULL;
    if (i >= kMaxKeyChars) continue;
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    if (!keep) altered = true;
    out[pos++] = keep ? static_cast<char>(c) : '_';
  }
  if (altered) {
    std::snprintf(out + pos, out_len - pos, "-%016llx", static_cast<unsigned long long>(hash));
  } else {
    out[pos] = '\0';
  }
  return true;
}

}  // namespace gpuslice::memcap
