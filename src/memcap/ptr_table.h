#pragma once
// PtrTable: the sizes of one process's live allocations, keyed by device pointer, array handle
// or generic allocation handle, so a free knows how many bytes to give back to the slice.
//
// Open addressing with linear probing and backward-shift deletion (no tombstones), grown by
// doubling at half load. Uses malloc/free only (no STL): it lives in the preloaded interposer.
// Not thread-safe: the interposer guards each table with a mutex.

#include <cstddef>
#include <cstdint>

namespace gpuslice::memcap {

class PtrTable {
 public:
  PtrTable() = default;
  ~PtrTable();
  PtrTable(const PtrTable&) = delete;
  PtrTable& operator=(const PtrTable&) = delete;

  // Records key -> bytes (replacing an existing entry). Key 0 is not storable. False when out of
  // memory (the allocation then simply stays unaccounted on free, never double-counted).
  bool Put(std::uint64_t key, std::int64_t bytes);
  // Removes key and returns its bytes, or -1 if absent.
  std::int64_t Take(std::uint64_t key);
  std::size_t size() const { return size_; }

 private:
  struct Entry {
    std::uint64_t key;  // 0 = empty
    std::int64_t bytes;
  };
  bool Grow();
  std::size_t Home(std::uint64_t key) const;

  Entry* entries_ = nullptr;
  std::size_t capacity_ = 0;  // power of two, or 0
  std::size_t size_ = 0;
};

}  // namespace gpuslice::memcap
