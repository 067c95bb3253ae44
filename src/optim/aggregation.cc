// The installed aggregator lookup (optim/aggregation.h).
#include "lockstep/optim/aggregation.h"

#include <atomic>

namespace lockstep {
namespace {
std::atomic<GradientAggregator* (*)()> g_lookup{nullptr};
}  // namespace

GradientAggregator* current_gradient_aggregator() {
  auto* lookup = g_lookup.load(std::memory_order_acquire);
  return lookup ? lookup() : nullptr;
}

void install_gradient_aggregator_lookup(GradientAggregator* (*lookup)()) {
  g_lookup.store(lookup, std::memory_order_release);
}

}  // namespace lockstep
