// The calling thread's gradient aggregator (optim/aggregation.h).
#include "lockstep/optim/aggregation.h"

namespace lockstep {
namespace {

// Per thread: each replica runs on its own thread with its own aggregator
// (and a parameter-server worker's function on the thread that runs it).
thread_local GradientAggregator* t_aggregator = nullptr;

}  // namespace

GradientAggregator* current_gradient_aggregator() { return t_aggregator; }

GradientAggregatorScope::GradientAggregatorScope(GradientAggregator* aggregator)
    : previous_(t_aggregator) {
  t_aggregator = aggregator;
}

GradientAggregatorScope::~GradientAggregatorScope() { t_aggregator = previous_; }

}  // namespace lockstep
