// Input for custom loops: InputContext and DistributedDataset, whose
// iterator gives each local replica its part of every global batch (through
// the strategy's one batch splitter) or its own pipeline's batch, until the
// input of some worker ends (the workers vote each step, as fit's do).
#include "lockstep/core/error.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"

namespace lockstep::distribute {

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  LOCKSTEP_CHECK(global_batch_size % num_replicas_in_sync == 0,
                 "get_per_replica_batch_size: ", "the global batch size ", global_batch_size,
                 " does not divide evenly over ", num_replicas_in_sync, " replicas");
  return global_batch_size / num_replicas_in_sync;
}

DistributedDataset DistributedDataset::from_global(const Strategy& strategy,
                                                   data::Dataset global_batches) {
  LOCKSTEP_CHECK(global_batches.defined(), "experimental_distribute_dataset: undefined dataset");
  DistributedDataset d;
  d.strategy_ = strategy;
  d.datasets_ = {std::move(global_batches)};
  return d;
}

DistributedDataset DistributedDataset::from_function(
    const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn) {
  DistributedDataset d;
  d.strategy_ = strategy;
  const int n = strategy.num_replicas_in_sync();
  const int local = strategy.num_local_replicas();
  for (int r = 0; r < local; ++r) {
    // One pipeline per replica (tf.distribute gives one per worker): the
    // pipelines of all workers' replicas are numbered 0 .. n-1, so that
    // sharding by input_pipeline_id splits the input across workers too.
    const int id = strategy.worker_index() * local + r;
    data::Dataset ds = fn(
        InputContext{.num_input_pipelines = n, .input_pipeline_id = id, .num_replicas_in_sync = n});
    LOCKSTEP_CHECK(ds.defined(),
                   "distribute_datasets_from_function: the function returned an "
                   "undefined dataset for pipeline ",
                   r);
    d.datasets_.push_back(std::move(ds));
  }
  return d;
}

DistributedDataset::Iterator DistributedDataset::make_iterator(std::uint64_t epoch) const {
  Iterator it;
  it.strategy_ = strategy_;
  for (const auto& ds : datasets_) it.its_.push_back(ds.make_iterator({.epoch = epoch}));
  return it;
}

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next() {
  const int n = strategy_.num_replicas_in_sync();
  std::vector<data::Element> parts;
  bool have = true;
  if (its_.size() == 1 && n > 1) {
    // Every worker reads the global batches and keeps its replicas' rows
    // (auto-shard policy DATA).
    if (auto e = its_[0].next()) {
      StrategyExtended::LocalBatches local = strategy_.extended().split_batch(e->components());
      for (auto& views : local.parts) parts.emplace_back(std::move(views), e->names());
    } else {
      have = false;
    }
  } else {
    for (auto& it : its_) {
      auto e = it.next();
      if (!e) {
        have = false;
        break;
      }
      parts.push_back(std::move(*e));
    }
  }
  // The input ends for every worker when it ends for one, as fit's does:
  // pipelines of uneven length (distribute_datasets_from_function) never
  // leave a worker waiting in a step the others do not take.
  if (!strategy_.extended().agree_on_step(have, 0).all_have_batch) return std::nullopt;
  return PerReplica<data::Element>(std::move(parts));
}

}  // namespace lockstep::distribute
