// Input across workers: the auto-shard policies and this worker's batch
// stream under them (WorkerBatches: fit's and custom loops'), and for
// custom loops and the Estimator InputContext and DistributedDataset, whose
// iterator gives each local replica its part of every global batch
// (through the strategy's one batch splitter), its own pipeline's batch, or
// its turn of the worker's pipeline, until the input of some worker ends
// (the workers vote each step, as fit's do).
#include "lockstep/core/error.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/distribute/worker_batches.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"

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

namespace {

// The batches copied ahead to the replicas' accelerator (TensorFlow's
// InputOptions.experimental_fetch_to_device, on by default): to the one
// replica's device, or to the first when every replica's device shares its
// memory (logical GPUs of one GPU, the fake devices), waiting for the copies
// then since the others read on streams of their own. Replicas on CPUs, or
// on GPUs that do not share memory, take their batches from host memory,
// copied at their first op.
data::Dataset fetch_to_device(const Strategy& strategy, data::Dataset dataset) {
  std::vector<Device*> devices = strategy.replica_devices();
  if (strategy.is_default()) devices = {&current_device()};
  if (devices.empty()) return dataset;
  for (const Device* d : devices) {
    if (d->kernels() == nullptr || !d->kernels()->shares_memory_with(*devices[0]->kernels()))
      return dataset;
  }
  return dataset.prefetch_to_device(*devices[0],
                                    {.buffer_size = 1, .synchronize = devices.size() > 1});
}

}  // namespace

WorkerBatches::WorkerBatches(const Strategy* strategy, data::Dataset dataset, std::string op)
    : op_(std::move(op)), dataset_(std::move(dataset)) {
  LOCKSTEP_CHECK(dataset_.defined(), op_, ": the dataset is undefined");
  if (strategy == nullptr) return;
  if (strategy->num_workers() > 1) {
    StrategyExtended::AutoShard shard = strategy->extended().auto_shard(dataset_, op_);
    dataset_ = std::move(shard.dataset);
    parts_ = shard.parts;
  }
  dataset_ = fetch_to_device(*strategy, std::move(dataset_));
}

WorkerBatches WorkerBatches::unstarted_copy() const {
  WorkerBatches copy;
  copy.op_ = op_;
  copy.dataset_ = dataset_;
  copy.parts_ = parts_;
  return copy;
}

void WorkerBatches::start(std::uint64_t epoch_key) {
  epoch_key_ = epoch_key;
  it_ = dataset_.make_iterator({.epoch = epoch_key});
  current_.reset();
  part_ = 0;
}

std::optional<data::Element> WorkerBatches::next() {
  LOCKSTEP_CHECK_AS(InternalError, it_.has_value(), op_, ": the input was not started");
  if (parts_ == 1) return it_->next();
  if (!current_ || part_ == parts_) {
    current_ = it_->next();
    part_ = 0;
    if (!current_) return std::nullopt;
  }
  return StrategyExtended::batch_part(*current_, parts_, part_++);
}

std::int64_t WorkerBatches::elements_read() const { return it_ ? it_->position() : 0; }

WorkerBatches::Position WorkerBatches::position() const {
  return {.epoch_key = epoch_key_, .elements = elements_read(), .part = parts_ > 1 ? part_ : 0};
}

void WorkerBatches::restore(const Position& p) {
  start(p.epoch_key);
  // Every random choice is a function of the seeds and the iteration key
  // (data/dataset.h), so the same elements come again: skip them.
  std::int64_t skip = p.elements;
  const bool mid_element = parts_ > 1 && p.part > 0 && p.part < parts_;
  if (mid_element) --skip;  // the element being cut is read again below
  for (std::int64_t i = 0; i < skip; ++i) {
    LOCKSTEP_CHECK(it_->next().has_value(), op_, ": cannot resume: the dataset ended after ", i,
                   " of the ", skip, " elements used before the checkpoint");
  }
  if (mid_element) {
    current_ = it_->next();
    LOCKSTEP_CHECK(current_.has_value(), op_,
                   ": cannot resume: the dataset ended before the element being cut");
    part_ = p.part;
  }
}

data::IteratorState WorkerBatches::save_full() {
  LOCKSTEP_CHECK_AS(InternalError, it_.has_value(), op_, ": the input was not started");
  LOCKSTEP_CHECK(parts_ == 1, op_,
                 ": the full input state cannot be saved under auto-shard FILE or OFF (each "
                 "worker's pipeline is its own); the default replay position resumes every "
                 "worker");
  return it_->save();
}

void WorkerBatches::restore_full(std::uint64_t epoch_key, const data::IteratorState& state) {
  start(epoch_key);
  it_->restore(state);
}

DistributedDataset DistributedDataset::from_global(const Strategy& strategy,
                                                   data::Dataset global_batches) {
  LOCKSTEP_CHECK(global_batches.defined(), "experimental_distribute_dataset: undefined dataset");
  DistributedDataset d;
  d.strategy_ = strategy;
  d.mode_ = kGlobal;
  d.global_ = std::make_shared<const WorkerBatches>(&strategy, std::move(global_batches),
                                                    "experimental_distribute_dataset");
  return d;
}

DistributedDataset DistributedDataset::from_function(
    const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn) {
  DistributedDataset d;
  d.strategy_ = strategy;
  d.mode_ = kPerReplica;
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
    // Each replica's batches sent ahead to its own accelerator, where it
    // reads them on its own stream.
    const std::vector<Device*>& devices = strategy.replica_devices();
    if (!strategy.is_default() && static_cast<int>(devices.size()) == local &&
        devices[static_cast<std::size_t>(r)]->kernels() != nullptr)
      ds = ds.prefetch_to_device(*devices[static_cast<std::size_t>(r)]);
    d.datasets_.push_back(std::move(ds));
  }
  return d;
}

DistributedDataset DistributedDataset::from_worker_function(
    const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn) {
  DistributedDataset d;
  d.strategy_ = strategy;
  d.mode_ = kPerWorker;
  data::Dataset ds = fn(InputContext{.num_input_pipelines = strategy.num_workers(),
                                     .input_pipeline_id = strategy.worker_index(),
                                     .num_replicas_in_sync = strategy.num_replicas_in_sync()});
  LOCKSTEP_CHECK(ds.defined(), "input_fn returned an undefined dataset on worker ",
                 strategy.worker_index());
  d.datasets_.push_back(std::move(ds));
  return d;
}

DistributedDataset::Iterator DistributedDataset::make_iterator(std::uint64_t epoch) const {
  Iterator it;
  it.strategy_ = strategy_;
  it.mode_ = mode_;
  if (mode_ == kGlobal) {
    it.global_ = std::make_unique<WorkerBatches>(global_->unstarted_copy());
    it.global_->start(epoch);
  }
  for (const auto& ds : datasets_) it.its_.push_back(ds.make_iterator({.epoch = epoch}));
  return it;
}

// What this worker read for one step, before the vote: each local replica's
// element (some missing, for evaluation's partial steps), or the one batch
// to split (a global batch, or under FILE / OFF this worker's part).
struct DistributedDataset::Iterator::Local {
  std::vector<std::optional<data::Element>> parts;
  std::optional<data::Element> batch;
  bool have = true;
  std::int64_t rows = 0;  // this worker's rows, summed by the vote
};

DistributedDataset::Iterator::Iterator() = default;
DistributedDataset::Iterator::~Iterator() = default;
DistributedDataset::Iterator::Iterator(Iterator&&) noexcept = default;
DistributedDataset::Iterator& DistributedDataset::Iterator::operator=(Iterator&&) noexcept =
    default;

namespace {
std::int64_t rows_of(const data::Element& e) {
  if (e.size() == 0) return 0;
  return e[0].rank() == 0 ? 1 : e[0].dim(0);
}
}  // namespace

DistributedDataset::Iterator::Local DistributedDataset::Iterator::read_local(bool partial) {
  if (pending_) {
    Local l = std::move(*pending_);
    pending_.reset();
    return l;
  }
  Local l;
  if (mode_ == kGlobal) {
    l.batch = global_->next();
    l.have = l.batch.has_value();
    // A global batch is every worker's (DATA): the vote does not sum it.
    if (l.batch && global_->worker_part()) l.rows = rows_of(*l.batch);
    return l;
  }
  const int replicas = strategy_.num_local_replicas();
  for (int r = 0; r < replicas; ++r) {
    // Per worker: the replicas take the worker's elements in turn.
    data::Iterator& it = its_[mode_ == kPerWorker ? 0 : static_cast<std::size_t>(r)];
    std::optional<data::Element> e = it.next();
    if (!e) {
      l.have = false;
      if (!partial) break;
    } else {
      l.rows += rows_of(*e);
    }
    l.parts.push_back(std::move(e));
  }
  return l;
}

const data::Element* DistributedDataset::Iterator::peek() {
  if (!pending_) pending_ = std::make_unique<Local>(read_local(/*partial=*/true));
  if (pending_->batch) return &*pending_->batch;
  if (!pending_->parts.empty() && pending_->parts[0]) return &*pending_->parts[0];
  return nullptr;
}

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next(bool stop) {
  Local l = read_local(/*partial=*/false);
  const StrategyExtended::StepAgreement agreement =
      strategy_.extended().agree_on_step(l.have && !stop, l.rows);
  if (!agreement.all_have_batch) return std::nullopt;
  std::vector<data::Element> parts;
  if (l.batch) {
    // A global batch: this worker keeps its replicas' rows (DATA); a
    // worker's part (FILE / OFF): all of it goes to its replicas.
    const bool worker_part = global_->worker_part();
    global_rows_ = worker_part ? agreement.total_rows : rows_of(*l.batch);
    StrategyExtended::LocalBatches local = strategy_.extended().split_batch(
        l.batch->components(), worker_part, worker_part ? agreement.total_rows : 0);
    for (auto& views : local.parts) parts.emplace_back(std::move(views), l.batch->names());
  } else {
    global_rows_ = agreement.total_rows;
    for (auto& e : l.parts) parts.push_back(std::move(*e));
  }
  return PerReplica<data::Element>(std::move(parts));
}

std::optional<std::vector<std::optional<data::Element>>>
DistributedDataset::Iterator::next_partial() {
  LOCKSTEP_CHECK(mode_ != kGlobal,
                 "DistributedDataset: next_partial takes inputs with one dataset per replica or "
                 "per worker; a global batch is split over every replica (use next)");
  Local l = read_local(/*partial=*/true);
  std::vector<double> have{0.0, 0.0};
  for (const auto& e : l.parts) have[0] += e ? 1.0 : 0.0;
  have[1] = static_cast<double>(l.rows);
  strategy_.extended().sum_across_workers(have);
  if (have[0] == 0) return std::nullopt;
  global_rows_ = static_cast<std::int64_t>(have[1]);
  return std::move(l.parts);
}

}  // namespace lockstep::distribute
