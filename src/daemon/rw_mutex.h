#pragma once
// WriterFirstMutex: the daemon's reader-writer lock. std::shared_mutex on glibc prefers readers:
// while any reader holds it, new readers keep getting in, so a user looping cheap reads on a
// few connections held every submit, cancel and control-loop step for as long as the loop ran
// (40 s in the probe). Here a waiting writer goes before readers that arrive after it, so a
// write waits only for the reads already under way (each kept short: views copy what they need
// and render outside the lock).
// Not recursive: a thread holding it shared must not take it shared again (a writer waiting in
// between would deadlock both); the daemon's entry points take it once each.
// Thread-safe; meets the SharedMutex requirements (std::unique_lock, std::shared_lock).

#include <pthread.h>

namespace gpuslice::daemon {

class WriterFirstMutex {
 public:
  WriterFirstMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~WriterFirstMutex() { pthread_rwlock_destroy(&rw_); }
  WriterFirstMutex(const WriterFirstMutex&) = delete;
  WriterFirstMutex& operator=(const WriterFirstMutex&) = delete;

  void lock() { pthread_rwlock_wrlock(&rw_); }
  bool try_lock() { return pthread_rwlock_trywrlock(&rw_) == 0; }
  void unlock() { pthread_rwlock_unlock(&rw_); }
  void lock_shared() { pthread_rwlock_rdlock(&rw_); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&rw_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&rw_); }

 private:
  pthread_rwlock_t rw_;
};

}  // namespace gpuslice::daemon
