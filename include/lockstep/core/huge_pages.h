// Large buffers on transparent huge pages: one page fault per 2 MiB
// instead of 512.
//
// Debian's THP mode is "madvise": nothing is huge unless asked. Where a
// fresh page is dear — on the project's 2-core VM (AMD EPYC, Zen 3) 8 MiB
// zero-filled on 4 KiB pages took 6–9 ms, on huge pages 1.2–1.7 ms — a
// buffer that is written once after it is allocated (a file's bytes, a
// table's columns, a tensor) pays for its pages more than for its work.
// Buffers of at least `huge_from` bytes sit on 2 MiB boundaries and carry
// MADV_HUGEPAGE; smaller ones come from malloc's heap. Advice only: where
// THP is off the buffer works as is.
//
// A HugePageVector is for a buffer about to be written over: its resize()
// leaves elements of trivial types unset, as `new T[n]` does (the kernel
// hands out zeroed pages; a second zeroing by the vector cost ~1 ms for
// 10 MB). Write every element before reading it.
//
//   ls::HugePageVector<double> column(rows);  // unset; every row written next
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// `bytes` from the system, aligned to `alignment` (a power of two that is a
// multiple of sizeof(void*)), on huge pages from `huge_from` bytes; nullptr
// when the system has none. Give it back with std::free.
void* system_allocate(std::size_t bytes, std::size_t alignment, std::size_t huge_from);

// A std::allocator on huge pages from kHugePage bytes (64-byte aligned
// below) that default-initialises.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding converts
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    void* p = system_allocate(n * sizeof(T), alignof(T) > 64 ? alignof(T) : 64, kHugePage);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept;
  // Default-initialisation: nothing for trivial types (see above).
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

void free_system_allocation(void* p) noexcept;

template <class T>
void HugePageAllocator<T>::deallocate(T* p, std::size_t) noexcept {
  free_system_allocation(p);
}

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace lockstep
