#pragma once
// Binds libgpuslice-cuda's libc references to the oldest symbol versions that provide them, so
// the library loads under old glibc releases (RHEL 7's 2.17, RHEL 8's 2.28, the images HPC
// containers are built from), not only under the glibc it was built against.
//
// Why: glibc 2.34 moved dlopen, dlvsym, shm_open, pthread_once and the mutex-attribute calls
// from libdl/librt/libpthread into libc under a new version (GLIBC_2.34) and kept the old
// versions as compatibility symbols. A library linked on a newer system binds to GLIBC_2.34, and
// an older dynamic linker then refuses to load it: every process of a capped slice would fail to
// start. Bound to the old version, the reference is found in libc (>= 2.34) or in
// libdl/libpthread/librt (older), which the library lists as DT_NEEDED (src/memcap/CMakeLists.txt)
// so they are loaded either way. fstat (GLIBC_2.33) is avoided altogether (a raw system call in
// segment.cc).
//
// Included only where GPUSLICE_MEMCAP_OLD_GLIBC is defined (the interposer's own compilation of
// interposer.cc and segment.cc); the executor-side library keeps the defaults. The test
// InterposerNeedsNoNewGlibc reads the built library's version needs and fails if one is newer than
// the base version below.

#ifdef GPUSLICE_MEMCAP_OLD_GLIBC
#include <features.h>  // defines __GLIBC__ (this header comes before any other)
#endif

#if defined(GPUSLICE_MEMCAP_OLD_GLIBC) && defined(__GLIBC__)

#if defined(__x86_64__)
#define GPUSLICE_GLIBC_BASE "GLIBC_2.2.5"
#define GPUSLICE_GLIBC_ROBUST "GLIBC_2.12"  // robust mutexes appeared in 2.12
#elif defined(__aarch64__)
#define GPUSLICE_GLIBC_BASE "GLIBC_2.17"    // the first aarch64 release: everything is there
#define GPUSLICE_GLIBC_ROBUST "GLIBC_2.17"
#endif

#ifdef GPUSLICE_GLIBC_BASE
__asm__(".symver dlopen,dlopen@" GPUSLICE_GLIBC_BASE);
__asm__(".symver dlclose,dlclose@" GPUSLICE_GLIBC_BASE);
__asm__(".symver dlvsym,dlvsym@" GPUSLICE_GLIBC_BASE);
__asm__(".symver shm_open,shm_open@" GPUSLICE_GLIBC_BASE);
__asm__(".symver pthread_once,pthread_once@" GPUSLICE_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_init,pthread_mutexattr_init@" GPUSLICE_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_destroy,pthread_mutexattr_destroy@" GPUSLICE_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_setpshared,pthread_mutexattr_setpshared@" GPUSLICE_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_setrobust,pthread_mutexattr_setrobust@" GPUSLICE_GLIBC_ROBUST);
__asm__(".symver pthread_mutex_consistent,pthread_mutex_consistent@" GPUSLICE_GLIBC_ROBUST);
#endif

#endif
