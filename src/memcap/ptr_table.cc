#include "memcap/ptr_table.h"

#include <cstdlib>

namespace gpuslice::memcap {

PtrTable::~PtrTable() { std::free(entries_); }

std::size_t PtrTable::Home(std::uint64_t key) const {
  // Pointers are aligned and handles sequential: mix the bits before masking.
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return static_cast<std::size_t>(key) & (capacity_ - 1);
}

bool PtrTable::Grow() {
  std::size_t new_capacity = capacity_ == 0 ? 64 : capacity_ * 2;
  auto* fresh = static_cast<Entry*>(std::calloc(new_capacity, sizeof(Entry)));
  if (fresh == nullptr) return false;
  Entry* old = entries_;
  std::size_t old_capacity = capacity_;
  entries_ = fresh;
  capacity_ = new_capacity;
  size_ = 0;
  for (std::size_t i = 0; i < old_capacity; ++i) {
    if (old[i].key != 0) Put(old[i].key, old[i].bytes);
  }
  std::free(old);
  return true;
}

bool PtrTable::Put(std::uint64_t key, std::int64_t bytes) {
  if (key == 0) return false;
  if ((size_ + 1) * 2 > capacity_ && !Grow()) return false;
  for (std::size_t i = Home(key);; i = (i + 1) & (capacity_ - 1)) {
    if (entries_[i].key == key) {
      entries_[i].bytes = bytes;
      return true;
    }
    if (entries_[i].key == 0) {
      entries_[i] = Entry{key, bytes};
      ++size_;
      return true;
    }
  }
}

std::int64_t PtrTable::Take(std::uint64_t key) {
  if (key == 0 || capacity_ == 0) return -1;
  std::size_t mask = capacity_ - 1;
  std::size_t i = Home(key);
  while (entries_[i].key != key) {
    if (entries_[i].key == 0) return -1;
    i = (i + 1) & mask;
  }
  std::int64_t bytes = entries_[i].bytes;
  // Backward-shift deletion: move later entries of the probe run into the hole when the hole
  // lies between their home and their current position (cyclically).
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask; entries_[j].key != 0; j = (j + 1) & mask) {
    std::size_t home = Home(entries_[j].key);
    bool movable = ((j - home) & mask) >= ((j - hole) & mask);
    if (movable) {
      entries_[hole] = entries_[j];
      hole = j;
    }
  }
  entries_[hole] = Entry{0, 0};
  --size_;
  return bytes;
}

}  // namespace gpuslice::memcap
