// The public parallel_for (tensor/parallel.h) over the kernels' own.
#include "lockstep/tensor/parallel.h"

#include "tensor/ops/loops.h"

namespace lockstep {

void parallel_for(std::int64_t n, std::int64_t cost_per_item,
                  const std::function<void(std::int64_t, std::int64_t)>& f) {
  detail::parallel_for(n, cost_per_item, f);
}

}  // namespace lockstep
