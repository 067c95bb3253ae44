// Input across workers: the auto-shard policies (fit's and custom loops'),
// and for custom loops InputContext and DistributedDataset, whose iterator
// gives each local replica its part of every global batch (through the
// strategy's one batch splitter) or its own pipeline's batch, until the
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

StrategyExtended::AutoShard StrategyExtended::auto_shard(data::Dataset dataset,
                                                         const std::string& op) const {
  const int workers = strategy_.num_workers();
  if (workers == 1) return {std::move(dataset), 1};
  const data::AutoShardPolicy policy = dataset.options().experimental_distribute.auto_shard_policy;
  if (policy == data::AutoShardPolicy::kData) return {std::move(dataset), 1};
  if (policy == data::AutoShardPolicy::kFile || policy == data::AutoShardPolicy::kAuto) {
    data::Dataset sharded = dataset.with_sharded_files(workers, strategy_.worker_index());
    if (!sharded.defined()) {
      LOCKSTEP_CHECK(policy == data::AutoShardPolicy::kAuto, op,
                     ": auto-shard policy FILE needs a pipeline that reads a file list "
                     "(Dataset::from_files / list_files) with at least one file for each of the ",
                     workers,
                     " workers, through transformations that can follow it (not zip, "
                     "concatenate or cache to a file); use DATA or OFF");
      return {std::move(dataset), 1};  // AUTO: DATA
    }
    return {std::move(sharded), workers};
  }
  return {std::move(dataset), workers};  // OFF
}

data::Element StrategyExtended::batch_part(const data::Element& batch, int parts, int part) {
  const std::int64_t rows = batch.size() > 0 ? batch[0].dim(0) : 0;
  const std::vector<std::int64_t> sizes = even_split(rows, parts);
  std::int64_t begin = 0;
  for (int k = 0; k < part; ++k) begin += sizes[static_cast<std::size_t>(k)];
  const std::int64_t end = begin + sizes[static_cast<std::size_t>(part)];
  std::vector<Tensor> views;
  for (const Tensor& t : batch.components()) views.push_back(t.view_rows(begin, end));
  return data::Element(std::move(views), batch.names());
}

DistributedDataset DistributedDataset::from_global(const Strategy& strategy,
                                                   data::Dataset global_batches) {
  LOCKSTEP_CHECK(global_batches.defined(), "experimental_distribute_dataset: undefined dataset");
  DistributedDataset d;
  d.strategy_ = strategy;
  StrategyExtended::AutoShard shard =
      strategy.extended().auto_shard(std::move(global_batches), "experimental_distribute_dataset");
  d.datasets_ = {std::move(shard.dataset)};
  d.parts_ = shard.parts;
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
  it.parts_ = parts_;
  for (const auto& ds : datasets_) it.its_.push_back(ds.make_iterator({.epoch = epoch}));
  return it;
}

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next() {
  const int n = strategy_.num_replicas_in_sync();
  std::vector<data::Element> parts;
  bool have = true;
  std::optional<data::Element> worker_part;  // FILE / OFF: this worker's part of a batch
  if (its_.size() == 1 && parts_ > 1) {
    // Each batch of this worker's own pipeline is cut into one part per
    // worker, taken one per step (as fit's).
    if (!current_ || part_ == parts_) {
      current_ = its_[0].next();
      part_ = 0;
    }
    if (current_) {
      worker_part = StrategyExtended::batch_part(*current_, parts_, part_++);
    } else {
      have = false;
    }
  } else if (its_.size() == 1 && n > 1) {
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
  const std::int64_t rows = worker_part && worker_part->size() > 0 ? (*worker_part)[0].dim(0) : 0;
  const StrategyExtended::StepAgreement agreement = strategy_.extended().agree_on_step(have, rows);
  if (!agreement.all_have_batch) return std::nullopt;
  if (worker_part) {
    // This worker's part goes to its replicas, all of it.
    StrategyExtended::LocalBatches local = strategy_.extended().split_batch(
        worker_part->components(), /*worker_part=*/true, agreement.total_rows);
    for (auto& views : local.parts) parts.emplace_back(std::move(views), worker_part->names());
  }
  return PerReplica<data::Element>(std::move(parts));
}

}  // namespace lockstep::distribute
