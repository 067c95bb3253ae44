// system_allocate: aligned system memory, on transparent huge pages when
// large (huge_pages.h).
#include "lockstep/core/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace lockstep {

void* system_allocate(std::size_t bytes, std::size_t alignment, std::size_t huge_from) {
  if (bytes == 0) bytes = 1;
  const bool huge = bytes >= huge_from;
  void* ptr = nullptr;
  // posix_memalign, not aligned_alloc: no rule that the size be a multiple
  // of the alignment.
  if (::posix_memalign(&ptr, huge && alignment < kHugePage ? kHugePage : alignment, bytes) != 0)
    return nullptr;
  if (huge) ::madvise(ptr, bytes, MADV_HUGEPAGE);
  return ptr;
}

void free_system_allocation(void* p) noexcept { std::free(p); }

}  // namespace lockstep
