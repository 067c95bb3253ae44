// The Strategy facade (what a strategy is asked, its scope, reduce, the
// batch split and the agreements across workers), MirroredStrategy and
// OneDeviceStrategy, and the loss helpers of custom loops. The replica
// threads are replica_pool.cc's, the multi-worker rendezvous
// multi_worker.cc's, the input distribution distributed_dataset.cc's.
#include "lockstep/distribute/strategy.h"

#include <cstdio>

#include "lockstep/core/error.h"
#include "lockstep/core/hash.h"
#include "lockstep/core/log.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/tensor/ops.h"
#include "strategy_impl.h"

namespace lockstep::distribute {

namespace {

// The strategies whose scope is open on this thread, innermost last: per
// thread, as tf.distribute's scopes are (another thread may build another
// model under another strategy at the same time).
thread_local std::vector<Strategy> t_strategies;

std::shared_ptr<StrategyImpl> default_impl() {
  static auto impl =
      std::make_shared<StrategyImpl>("DefaultStrategy", std::vector<Device*>{&host_device()}, 1,
                                     comm::InProcessGroup::Options{}, true);
  return impl;
}

}  // namespace

Strategy::Strategy() : impl_(default_impl()) {}

int Strategy::num_replicas_in_sync() const { return impl_->num_replicas_in_sync(); }
int Strategy::num_local_replicas() const { return impl_->size(); }
int Strategy::num_workers() const { return impl_->workers().num_workers; }
int Strategy::worker_index() const { return impl_->workers().worker_index; }
StrategyExtended Strategy::extended() const { return StrategyExtended(*this); }

comm::Communicator* StrategyExtended::cross_worker_communicator() const {
  return strategy_.impl_->workers().comm.get();
}
const std::vector<Device*>& Strategy::replica_devices() const { return impl_->devices(); }
const std::string& Strategy::name() const { return impl_->name(); }
bool Strategy::is_default() const { return impl_->is_default(); }
const std::string& Strategy::cross_device_reduction() const {
  return impl_->cross_device_reduction();
}

Strategy::Scope::Scope(const Strategy& strategy)
    : creator_([impl = strategy.impl_](const Tensor& initial, Variable::Options options) {
        return impl->create_variable(initial, std::move(options));
      }) {
  t_strategies.push_back(strategy);
}

Strategy::Scope::~Scope() { t_strategies.pop_back(); }

void Strategy::run_replicas(const std::function<void(ReplicaContext&)>& fn) const {
  impl_->run(fn);
}

void Strategy::run_step(const std::vector<std::int64_t>& rows,
                        const std::function<void(ReplicaContext&)>& fn) const {
  extended().run_step({.global_rows = 0, .sizes = rows, .sync = nullptr}, fn);
}

void StrategyExtended::run_step(const ReplicaStep& step,
                                const std::function<void(ReplicaContext&)>& fn) const {
  const std::vector<Variable> kept =
      step.sync == nullptr ? strategy_.impl_->variables_kept_in_sync() : std::vector<Variable>{};
  const std::vector<Variable>& sync = step.sync == nullptr ? kept : *step.sync;
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    ctx.set_batch(step.global_rows, i < step.sizes.size() ? step.sizes[i] : 0);
    std::vector<std::uint64_t> versions;
    versions.reserve(sync.size());
    for (const Variable& v : sync) versions.push_back(v.version());
    fn(ctx);
    ctx.sync_non_trainable(sync, versions);
  });
}

void Strategy::check_per_replica_size(int size) const {
  LOCKSTEP_CHECK(size == num_local_replicas(), "Strategy::run: a PerReplica argument holds ", size,
                 " values for ", num_local_replicas(),
                 " local replicas (make it with this strategy's distributed dataset or run)");
}

std::vector<std::int64_t> even_split(std::int64_t rows, int parts) {
  LOCKSTEP_CHECK(parts >= 1 && rows >= 0, "even_split: cannot cut ", rows, " rows into ", parts,
                 " parts");
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), rows / parts);
  for (std::int64_t r = 0; r < rows % parts; ++r) ++sizes[static_cast<std::size_t>(r)];
  return sizes;
}

std::vector<std::int64_t> StrategyExtended::split_sizes(std::int64_t global_batch) const {
  return even_split(global_batch, strategy_.num_replicas_in_sync());
}

StrategyExtended::LocalShare StrategyExtended::local_share(std::int64_t global_batch) const {
  const std::vector<std::int64_t> all = split_sizes(global_batch);
  const int k = strategy_.num_local_replicas();
  const int first = strategy_.worker_index() * k;
  LocalShare share;
  for (int r = 0; r < first; ++r) share.begin += all[static_cast<std::size_t>(r)];
  share.sizes.assign(all.begin() + first, all.begin() + first + k);
  return share;
}

StrategyExtended::LocalBatches StrategyExtended::split_batch(const std::vector<Tensor>& batch,
                                                             bool worker_part,
                                                             std::int64_t global_rows) const {
  LOCKSTEP_CHECK(!batch.empty() && batch[0].defined() && batch[0].rank() >= 1,
                 "split_batch: a batch needs at least one tensor with a batch dimension");
  const std::int64_t rows = batch[0].dim(0);
  LocalBatches out;
  LocalShare local;
  if (worker_part) {
    out.global_rows = global_rows;
    local.sizes = even_split(rows, strategy_.num_local_replicas());
  } else {
    out.global_rows = rows;
    local = local_share(rows);
  }
  out.sizes = local.sizes;
  out.parts.resize(out.sizes.size());
  std::int64_t begin = local.begin;
  for (std::size_t r = 0; r < out.sizes.size(); ++r) {
    for (const Tensor& t : batch) out.parts[r].push_back(t.view_rows(begin, begin + out.sizes[r]));
    begin += out.sizes[r];
  }
  return out;
}

StrategyExtended::StepAgreement StrategyExtended::agree_on_step(bool have_batch,
                                                                std::int64_t rows) const {
  comm::Communicator* workers = cross_worker_communicator();
  if (!workers) return {have_batch, rows};
  // How many workers are out of data, and the rows of this step's parts.
  double agree[2] = {have_batch ? 0.0 : 1.0, static_cast<double>(rows)};
  workers->all_reduce(agree, 2, ReduceOp::kSum);
  return {agree[0] == 0.0, static_cast<std::int64_t>(agree[1])};
}

void StrategyExtended::check_workers_agree(
    const std::string& op, const std::vector<std::pair<std::string, std::string>>& facts) const {
  comm::Communicator* workers = cross_worker_communicator();
  if (!workers) return;
  const std::size_t n = facts.size();
  std::vector<std::uint64_t> mine;
  for (const auto& [what, text] : facts) mine.push_back(fnv1a64(text));
  std::vector<std::uint64_t> all(n * static_cast<std::size_t>(workers->size()));
  workers->all_gather(mine.data(), n * sizeof(std::uint64_t), all.data());
  for (std::size_t k = 0; k < n; ++k) {
    std::string differ;
    for (int w = 1; w < workers->size(); ++w) {
      if (all[n * static_cast<std::size_t>(w) + k] != all[k])
        differ += (differ.empty() ? "worker " : ", worker ") + std::to_string(w);
    }
    LOCKSTEP_CHECK_AS(DistributedError, differ.empty(), op, ": ", differ, " has another ",
                      facts[k].first,
                      " than the chief (worker 0); every worker must run the same program on the "
                      "same input");
  }
}

bool StrategyExtended::sums_on_devices() const { return strategy_.impl_->sums_on_devices(); }

bool StrategyExtended::uses_parameter_servers() const {
  return strategy_.impl_->uses_parameter_servers();
}
void StrategyExtended::pull_variables(const std::vector<Variable>& vars) const {
  strategy_.impl_->pull_variables(vars);
}
void StrategyExtended::push_variables(const std::vector<Variable>& vars) const {
  strategy_.impl_->push_variables(vars);
}
StrategyExtended::OptimizerState StrategyExtended::read_optimizer_state(
    const std::vector<Variable>& trainable) const {
  return strategy_.impl_->read_optimizer_state(trainable);
}
void StrategyExtended::write_optimizer_state(const std::vector<Variable>& trainable,
                                             const OptimizerState& state) const {
  strategy_.impl_->write_optimizer_state(trainable, state);
}

void StrategyExtended::sum_across_workers(std::vector<double>& values) const {
  if (comm::Communicator* workers = cross_worker_communicator())
    workers->all_reduce(values.data(), values.size(), ReduceOp::kSum);
}

void StrategyExtended::barrier_across_workers() const {
  if (comm::Communicator* workers = cross_worker_communicator()) workers->barrier();
}

std::string StrategyExtended::workers_waiting_to_rejoin() const {
  const CrossWorker& w = strategy_.impl_->workers();
  if (!w.waiting_to_rejoin) return {};
  std::string waiting = w.waiting_to_rejoin();
  std::vector<double> count{waiting.empty() ? 0.0 : 1.0};
  sum_across_workers(count);
  if (count[0] == 0.0) return {};
  return waiting.empty() ? "a worker left out" : waiting;
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value,
                        std::optional<int> axis) const {
  LOCKSTEP_CHECK(value.size() == num_local_replicas(), "Strategy::reduce: ", value.size(),
                 " values for ", num_local_replicas(), " local replicas");
  LOCKSTEP_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean,
                 "Strategy::reduce: expected ReduceOp::kSum or kMean (tf.distribute.ReduceOp), "
                 "got kMax or kMin");
  Tensor total;
  std::int64_t count = 0;
  for (const Tensor& replica_value : value.values()) {
    check_defined(replica_value, "Strategy::reduce", "value");
    // To the host first, as TensorFlow reduces to the CPU: the caller reads
    // the result, and replicas on GPUs hold their values in device memory.
    const Tensor v = replica_value.cpu();
    Tensor part = v;
    if (axis) {
      const int a = *axis < 0 ? *axis + v.rank() : *axis;
      LOCKSTEP_CHECK(a >= 0 && a < v.rank(), "Strategy::reduce: axis ", *axis,
                     " is out of range for a value of shape ", v.shape());
      count += v.dim(a);
      part = sum(v, {.axes = {a}});
    }
    total = total.defined() ? add(total, part) : part.copy();
  }
  if (comm::Communicator* workers = extended().cross_worker_communicator()) {
    // The other workers' replicas: sum in float32 (as the values are), the
    // element count in float64.
    total = total.to(DType::kFloat32).copy();
    all_reduce_tensor(*workers, total, ReduceOp::kSum);
    double c = static_cast<double>(count);
    workers->all_reduce(&c, 1, ReduceOp::kSum);
    count = static_cast<std::int64_t>(c);
  }
  if (op == ReduceOp::kMean) {
    const double d = axis ? static_cast<double>(count) : num_replicas_in_sync();
    total = div(total, Tensor::scalar(static_cast<float>(d)));
  }
  return total;
}

MirroredStrategyOptions with_named_devices(const std::vector<std::string>& names,
                                           MirroredStrategyOptions o) {
  LOCKSTEP_CHECK(o.devices.empty(), "MirroredStrategy: devices given by name and in options");
  LOCKSTEP_CHECK(!names.empty(), "MirroredStrategy: an empty device list");
  for (const std::string& name : names) o.devices.push_back(&device(name));
  return o;
}

MirroredStrategy::MirroredStrategy(MirroredStrategyOptions o) {
  // Every logical device, one per physical core unless the program chose
  // them (DESIGN.md; the guide prints "Number of devices: 2" here).
  std::vector<Device*> devices = o.devices;
  if (devices.empty()) devices = gpu_devices().empty() ? logical_devices() : gpu_devices();
  LOCKSTEP_CHECK(!devices.empty(), "MirroredStrategy: no devices");
  LOCKSTEP_CHECK(o.replicas_per_device >= 1,
                 "MirroredStrategy: replicas_per_device must be >= 1, got ", o.replicas_per_device);
  int shared_core = -1;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    LOCKSTEP_CHECK(devices[i] != nullptr, "MirroredStrategy: device ", i, " is null");
    for (std::size_t j = 0; j < i; ++j) {
      LOCKSTEP_CHECK(devices[i] != devices[j], "MirroredStrategy: device ", devices[i]->name(),
                     " is listed twice (use replicas_per_device to run several replicas on one "
                     "device)");
      for (int c : devices[i]->cores()) {
        for (int d : devices[j]->cores()) shared_core = c == d ? c : shared_core;
      }
    }
  }
  if (shared_core >= 0 && devices[0]->kernels() == nullptr) {
    // More logical devices than cores (LOCKSTEP_CPU_DEVICES=3 on 2 cores), as
    // TensorFlow allows: their replicas take turns on the shared cores.
    log(LogLevel::kWarning,
        detail::str_cat("MirroredStrategy: ", devices.size(), " devices share ",
                        available_physical_cores().size(), " cores (core ", shared_core,
                        " is in several); their replicas take turns on them\n"));
  }
  auto impl = std::make_shared<StrategyImpl>(
      "MirroredStrategy", std::move(devices), o.replicas_per_device,
      comm::InProcessGroup::Options{.algorithm = o.cross_device_ops, .timeout = o.timeout}, false,
      ReplicaOptions{.bytes_per_pack = o.bytes_per_pack,
                     .shard_optimizer_update = o.shard_optimizer_update});
  static_cast<Strategy&>(*this) = Strategy(std::move(impl));
}

OneDeviceStrategy::OneDeviceStrategy(Device& device) {
  static_cast<Strategy&>(*this) =
      Strategy(std::make_shared<StrategyImpl>("OneDeviceStrategy", std::vector<Device*>{&device}, 1,
                                              comm::InProcessGroup::Options{}, false));
}

Strategy get_strategy() { return t_strategies.empty() ? Strategy() : t_strategies.back(); }

Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size) {
  check_defined(per_example_loss, "compute_average_loss", "per_example_loss");
  const ReplicaContext& ctx = get_replica_context();
  std::int64_t b = global_batch_size;
  if (b == 0 && ctx.global_batch_size() > 0) b = ctx.global_batch_size();
  if (b == 0) {
    const std::int64_t local = per_example_loss.rank() > 0 ? per_example_loss.dim(0) : 1;
    b = local * ctx.num_replicas_in_sync();
  }
  LOCKSTEP_CHECK(b > 0, "compute_average_loss: global_batch_size must be > 0");
  return div(sum(per_example_loss), Tensor::scalar(static_cast<float>(b)));
}

Tensor scale_regularization_loss(const Tensor& loss) {
  const int n = get_replica_context().num_replicas_in_sync();
  return n == 1 ? loss : div(loss, Tensor::scalar(static_cast<float>(n)));
}

}  // namespace lockstep::distribute
