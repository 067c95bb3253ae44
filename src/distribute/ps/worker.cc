// A worker task of a parameter-server job: the registry of named functions
// and dataset functions, the worker's service (its per-worker iterators,
// its variables bound to the coordinator's, one function run at a time
// with the bound variables read from the ps tasks first and its optimizer
// updates sent to them), the WorkerContext a function is given, and the
// Server that serves a ps or worker task.
#include <cstring>
#include <map>
#include <unordered_map>

#include "distribute/ps/coordinator.h"
#include "distribute/ps/parameter_server.h"
#include "distribute/ps/ps_strategy.h"
#include "distribute/ps/wire.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/distribute/cluster_coordinator.h"

namespace lockstep::distribute {

// ---- The registry ----

namespace {

// Functions by name, registered once per process before any is run (the
// registry is the one place a name is looked up; a lock makes late
// registrations safe).
struct Registry {
  std::mutex mu;
  std::map<std::string, WorkerFunction> functions;
  std::map<std::string, DatasetFunction> datasets;
};

Registry& registry() {
  static Registry r;
  return r;
}

template <typename Map>
std::string names_of(const Map& m) {
  std::string all;
  for (const auto& [name, unused] : m) all += (all.empty() ? "" : ", ") + name;
  return all.empty() ? "(none)" : all;
}

}  // namespace

void register_worker_function(const std::string& name, WorkerFunction fn) {
  LOCKSTEP_CHECK(!name.empty() && fn, "register_worker_function: a name and a function are needed");
  std::lock_guard lk(registry().mu);
  LOCKSTEP_CHECK(registry().functions.emplace(name, std::move(fn)).second,
                 "register_worker_function: '", name, "' is registered already");
}

void register_dataset_function(const std::string& name, DatasetFunction fn) {
  LOCKSTEP_CHECK(!name.empty() && fn,
                 "register_dataset_function: a name and a function are needed");
  std::lock_guard lk(registry().mu);
  LOCKSTEP_CHECK(registry().datasets.emplace(name, std::move(fn)).second,
                 "register_dataset_function: '", name, "' is registered already");
}

data::Dataset make_registered_dataset(const std::string& name, const InputContext& context,
                                      const std::vector<Tensor>& arguments) {
  DatasetFunction fn;
  {
    std::lock_guard lk(registry().mu);
    auto it = registry().datasets.find(name);
    LOCKSTEP_CHECK(it != registry().datasets.end(), "no dataset function '", name,
                   "' is registered in this process (registered: ", names_of(registry().datasets),
                   "); register it with register_dataset_function in every process of the job");
    fn = it->second;
  }
  return fn(context, arguments);
}

bool worker_function_registered(const std::string& name) {
  std::lock_guard lk(registry().mu);
  return registry().functions.count(name) > 0;
}

bool dataset_function_registered(const std::string& name) {
  std::lock_guard lk(registry().mu);
  return registry().datasets.count(name) > 0;
}

// ---- The worker's state and service ----

class WorkerState final : public comm::rpc::WorkerService, public GradientAggregator {
 public:
  WorkerState(const ClusterResolver& r, const std::string& token, std::chrono::milliseconds timeout)
      : index_(r.task_id()),
        num_workers_(r.cluster_spec().num_tasks("worker")),
        task_(r.describe_task("worker", r.task_id())),
        ps_(ps::open_channels(r, "ps", token, timeout)) {}

  int index() const { return index_; }
  int num_workers() const { return num_workers_; }
  const std::string& task() const { return task_; }

  // ---- WorkerService ----
  void set_variables(std::vector<comm::rpc::VariableLayout> variables) override {
    std::lock_guard lk(mu_);
    for (const Binding& b : bindings_) {
      const auto i = static_cast<std::size_t>(b.index);
      LOCKSTEP_CHECK(i < variables.size() && variables[i].shape == table_.at(i).shape, task_,
                     ": the coordinator's variable ", b.index,
                     " changed under a bound variable (another coordinator?)");
    }
    table_ = std::move(variables);
  }

  void create_dataset(comm::rpc::DatasetRequest d) override {
    std::vector<Tensor> args;
    for (const auto& a : d.arguments)
      args.push_back(ps::from_wire(a, task_ + ": dataset argument"));
    const InputContext ctx{.num_input_pipelines = d.num_input_pipelines,
                           .input_pipeline_id = d.input_pipeline_id,
                           .num_replicas_in_sync = d.num_replicas_in_sync};
    auto make = [&] {
      try {
        return make_registered_dataset(d.function, ctx, args).make_iterator();
      } catch (const Error&) {
        detail::rethrow_with_prefix(task_ + ": ");
      }
    };
    data::Iterator it = make();
    std::lock_guard lk(mu_);
    iterators_.insert_or_assign(d.iterator_id, std::move(it));
  }

  comm::rpc::FunctionResult run_function(const std::string& name,
                                         std::vector<comm::rpc::FunctionArgument> args) override {
    comm::rpc::FunctionResult result;
    std::lock_guard run(run_mu_);  // one function at a time on a worker
    try {
      WorkerFunction fn;
      {
        std::lock_guard lk(registry().mu);
        auto it = registry().functions.find(name);
        LOCKSTEP_CHECK(
            it != registry().functions.end(), task_, ": no function '", name,
            "' is registered in this process (registered: ", names_of(registry().functions),
            "); register it with register_worker_function in every process of the job");
        fn = it->second;
      }
      std::vector<Tensor> tensors;
      std::vector<std::int64_t> iterators;
      for (const auto& a : args) {
        iterators.push_back(a.iterator);
        tensors.push_back(a.iterator >= 0 ? Tensor()
                                          : ps::from_wire(a.tensor, task_ + ": argument"));
      }
      pull();
      WorkerContext context(*this, std::move(tensors), std::move(iterators));
      std::vector<Tensor> out;
      {
        GradientAggregatorScope remote(this);  // the update runs on the ps tasks
        out = fn(context);
      }
      for (const Tensor& t : out) result.results.push_back(ps::to_wire(t));
    } catch (const ps::PsUnavailable& e) {
      result = failure("ps_unavailable", e);
      result.ps_task = e.task();
    } catch (const std::exception& e) {
      result = failure("function", e);
    }
    return result;
  }

  // ---- GradientAggregator: the updates go to the ps tasks ----
  int num_local_replicas() const override { return 1; }
  std::vector<Tensor> sum_gradients(std::vector<Tensor> grads,
                                    const std::vector<Variable>&) override {
    return grads;
  }
  bool shares_update(const std::vector<Variable>&) const override { return false; }
  void run_update(const std::vector<Variable>&, const std::vector<UpdateSpan>&, std::int64_t total,
                  const UpdateRange& update) override {
    update(0, total);
  }
  bool apply_elsewhere(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       const OptimizerImpl& optimizer) override;

  // ---- For WorkerContext ----
  data::Element next(std::int64_t iterator_id) {
    data::Iterator* it = nullptr;
    {
      std::lock_guard lk(mu_);
      auto found = iterators_.find(iterator_id);
      LOCKSTEP_CHECK(found != iterators_.end(), task_, ": no per-worker iterator ", iterator_id,
                     " here");
      it = &found->second;
    }
    std::optional<data::Element> e = it->next();
    LOCKSTEP_CHECK_AS(IndexError, e.has_value(), task_,
                      ": the per-worker dataset ran out of data (end of sequence); repeat() it — "
                      "workers take batches for as long as the coordinator schedules steps");
    return std::move(*e);
  }

  void bind(const std::vector<Variable>& vars, const std::vector<std::int64_t>& indices) {
    LOCKSTEP_CHECK(vars.size() == indices.size(), "bind_variables: ", vars.size(),
                   " variables for ", indices.size(), " indices");
    std::vector<std::pair<Variable, comm::rpc::VariableLayout>> fresh;
    {
      std::lock_guard lk(mu_);
      for (std::size_t k = 0; k < vars.size(); ++k) {
        const Variable& v = vars[k];
        const std::int64_t i = indices[k];
        LOCKSTEP_CHECK(i >= 0 && i < static_cast<std::int64_t>(table_.size()), task_,
                       ": bind_variables: variable '", v.name(), "' is bound to the coordinator's ",
                       i, "-th variable, but the coordinator made ", table_.size(),
                       " in its strategy's scope");
        const comm::rpc::VariableLayout& l = table_[static_cast<std::size_t>(i)];
        LOCKSTEP_CHECK_AS(
            ShapeError, Shape(l.shape) == v.shape() && l.dtype == dtype_name(v.dtype()), task_,
            ": bind_variables: variable '", v.name(), "' (", v.dtype(), " ", v.shape(),
            ") cannot stand for the coordinator's '", l.name, "' (", l.dtype, " ", Shape(l.shape),
            "); build the model on the worker as on the coordinator");
        LOCKSTEP_CHECK(!by_id_.count(v.id()), task_, ": bind_variables: variable '", v.name(),
                       "' is bound already");
        by_id_[v.id()] = bindings_.size();
        bindings_.push_back({v, i, {}});
        fresh.emplace_back(v, l);
      }
    }
    // Bound variables hold the parameter servers' values at once.
    std::vector<std::vector<std::int64_t>> versions;
    ps::pull_into(ps_, fresh, &versions);
    std::lock_guard lk(mu_);
    for (std::size_t k = 0; k < fresh.size(); ++k)
      bindings_[by_id_.at(fresh[k].first.id())].read_versions = versions[k];
  }

  std::vector<std::pair<std::string, Shape>> coordinator_variables() const {
    std::lock_guard lk(mu_);
    std::vector<std::pair<std::string, Shape>> out;
    for (const auto& l : table_) out.emplace_back(l.name, Shape(l.shape));
    return out;
  }

  std::shared_ptr<void> resource(const std::string& key) const {
    std::lock_guard lk(mu_);
    auto it = resources_.find(key);
    return it == resources_.end() ? nullptr : it->second;
  }
  void set_resource(const std::string& key, std::shared_ptr<void> value) {
    std::lock_guard lk(mu_);
    resources_[key] = std::move(value);
  }

 private:
  struct Binding {
    Variable var;
    std::int64_t index = 0;
    std::vector<std::int64_t> read_versions;  // per shard, at the last read
  };

  static comm::rpc::FunctionResult failure(const char* kind, const std::exception& e) {
    comm::rpc::FunctionResult r;
    r.failed = true;
    r.error_kind = kind;
    r.error_type = detail::error_class_name(e);
    r.error_message = e.what();
    return r;
  }

  // The parameter servers take these bound variables' values.
 public:
  void push(const std::vector<Variable>& vars) {
    ps::EntriesByTask by_task;
    {
      std::lock_guard lk(mu_);
      for (const Variable& v : vars) {
        auto it = by_id_.find(v.id());
        LOCKSTEP_CHECK(it != by_id_.end(), task_, ": write_variables: variable '", v.name(),
                       "' is not bound to the coordinator's");
        ps::add_shard_entries(table_.at(static_cast<std::size_t>(bindings_[it->second].index)),
                              v.replica_value(0), {}, by_task);
      }
    }
    ps::assign_entries(std::move(by_task), std::nullopt, ps_);
  }

  // Every bound variable takes the parameter servers' current values.
  void pull() {
    std::vector<std::pair<Variable, comm::rpc::VariableLayout>> vars;
    {
      std::lock_guard lk(mu_);
      for (const Binding& b : bindings_)
        vars.emplace_back(b.var, table_.at(static_cast<std::size_t>(b.index)));
    }
    if (vars.empty()) return;
    std::vector<std::vector<std::int64_t>> versions;
    ps::pull_into(ps_, vars, &versions);
    std::lock_guard lk(mu_);
    for (std::size_t k = 0; k < bindings_.size() && k < versions.size(); ++k)
      bindings_[k].read_versions = versions[k];
  }

 private:
  int index_;
  int num_workers_;
  std::string task_;
  std::vector<std::shared_ptr<comm::rpc::Channel>> ps_;
  std::mutex run_mu_;
  mutable std::mutex mu_;
  std::vector<comm::rpc::VariableLayout> table_;
  std::vector<Binding> bindings_;
  std::unordered_map<std::uint64_t, std::size_t> by_id_;  // variable id -> binding
  std::map<std::int64_t, data::Iterator> iterators_;
  std::map<std::string, std::shared_ptr<void>> resources_;
};

bool WorkerState::apply_elsewhere(const std::vector<Tensor>& grads,
                                  const std::vector<Variable>& vars,
                                  const OptimizerImpl& optimizer) {
  const comm::rpc::OptimizerSpec spec = ps::optimizer_spec(optimizer);
  std::map<int, std::vector<comm::rpc::Gradient>> by_task{{0, {}}};  // task 0 counts the step
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      auto it = by_id_.find(vars[i].id());
      LOCKSTEP_CHECK(it != by_id_.end(), task_, ": apply_gradients: variable '", vars[i].name(),
                     "' is not bound to the coordinator's variables; bind it with "
                     "WorkerContext::bind_variables");
      const Binding& b = bindings_[it->second];
      const comm::rpc::VariableLayout& l = table_.at(static_cast<std::size_t>(b.index));
      std::int64_t row = 0;
      for (std::size_t s = 0; s < l.shards.size(); ++s) {
        const auto& shard = l.shards[s];
        by_task[shard.ps_task].push_back({shard.id,
                                          ps::rows_to_wire(grads[i], row, row + shard.rows),
                                          b.read_versions.empty() ? 0 : b.read_versions[s]});
        row += shard.rows;
      }
    }
  }
  std::vector<int> tasks;
  for (const auto& [task, unused] : by_task) tasks.push_back(task);
  ps::for_each_ps(
      tasks,
      [&](int task) {
        ps_.at(static_cast<std::size_t>(task))
            ->apply_gradients(spec, std::move(by_task.at(task)), task == 0);
      },
      ps_);
  return true;
}

// ---- WorkerContext ----

int WorkerContext::worker_index() const { return state_.index(); }
int WorkerContext::num_workers() const { return state_.num_workers(); }
const std::string& WorkerContext::task() const { return state_.task(); }

const Tensor& WorkerContext::argument(std::size_t i) const {
  LOCKSTEP_CHECK_AS(IndexError, i < tensors_.size(), task(), ": argument ", i, " of ",
                    tensors_.size());
  LOCKSTEP_CHECK(iterators_[i] < 0, task(), ": argument ", i,
                 " is a per-worker iterator; take its elements with next(", i, ")");
  return tensors_[i];
}

data::Element WorkerContext::next(std::size_t i) {
  LOCKSTEP_CHECK_AS(IndexError, i < iterators_.size(), task(), ": argument ", i, " of ",
                    iterators_.size());
  LOCKSTEP_CHECK(iterators_[i] >= 0, task(), ": argument ", i,
                 " is a tensor, not a per-worker iterator");
  return state_.next(iterators_[i]);
}

void WorkerContext::bind_variables(const std::vector<Variable>& vars, std::int64_t first) {
  std::vector<std::int64_t> indices;
  for (std::size_t k = 0; k < vars.size(); ++k)
    indices.push_back(first + static_cast<std::int64_t>(k));
  state_.bind(vars, indices);
}

void WorkerContext::bind_variables(const std::vector<Variable>& vars,
                                   const std::vector<std::int64_t>& indices) {
  state_.bind(vars, indices);
}

void WorkerContext::read_variables() { state_.pull(); }
void WorkerContext::write_variables(const std::vector<Variable>& vars) { state_.push(vars); }

std::vector<std::pair<std::string, Shape>> WorkerContext::coordinator_variables() const {
  return state_.coordinator_variables();
}

std::shared_ptr<void> WorkerContext::resource_ptr(const std::string& key) const {
  return state_.resource(key);
}

void WorkerContext::set_resource_ptr(const std::string& key, std::shared_ptr<void> value) {
  state_.set_resource(key, std::move(value));
}

// ---- Server ----

struct Server::Impl {
  std::unique_ptr<ps::ParameterServer> ps;
  std::unique_ptr<WorkerState> worker;
  std::unique_ptr<comm::rpc::Server> server;
};

Server::Server(const ClusterResolver& r, ServerOptions o) : impl_(std::make_unique<Impl>()) {
  const std::string& type = r.task_type();
  LOCKSTEP_CHECK(type == "ps" || type == "worker", "Server: this task is a ", type,
                 "; only ps and worker tasks serve (the chief coordinates: it constructs "
                 "ParameterServerStrategy)");
  r.check_parameter_server_cluster();
  const std::string task = r.describe_task(type, r.task_id());
  const std::string token = ps::job_token(o.job_token, task);
  if (type == "ps") {
    impl_->ps = std::make_unique<ps::ParameterServer>(task);
  } else {
    impl_->worker = std::make_unique<WorkerState>(r, token, o.timeout);
  }
  const TaskAddress& at = r.cluster_spec().task_address(type, r.task_id());
  impl_->server = comm::rpc::Server::start(
      {.host = at.host, .port = at.port, .token = token, .task = task, .threads = o.threads},
      impl_->ps.get(), impl_->worker.get());
}

Server::~Server() = default;

int Server::port() const { return impl_->server->port(); }

void Server::join() { impl_->server->wait_for_shutdown(); }

}  // namespace lockstep::distribute
