// ClusterCoordinator: the coordinator's side of ParameterServerStrategy —
// functions scheduled on workers, their RemoteValues, per-worker datasets
// (tf.distribute.coordinator.ClusterCoordinator) — and the workers' side:
// the registered functions they run, with their WorkerContext, and the
// Server that serves a worker or ps task.
//
// There is no graph to ship: the same binary runs on every task, functions
// are registered by name in every process, and the coordinator sends a
// function's name and arguments.
//
//   // In every process (before serving or scheduling):
//   ls::distribute::register_dataset_function("train_data",
//       [](const ls::distribute::InputContext& ctx, const std::vector<ls::Tensor>&) {
//         return make_dataset().shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
//                              .repeat().batch(64);
//       });
//   ls::distribute::register_worker_function("step", [](ls::distribute::WorkerContext& ctx) {
//     auto state = ctx.resource<State>("state");    // built once per worker process
//     if (!state) {
//       state = std::make_shared<State>();           // the model, built as on the coordinator
//       ctx.bind_variables(state->model.weights());  // ... on the coordinator's variables
//       ctx.set_resource("state", state);
//     }
//     auto batch = ctx.next(0);                      // argument 0: a per-worker iterator
//     ... GradientTape, state->optimizer.apply_gradients(grads, vars) ...  // to the ps tasks
//     return std::vector<ls::Tensor>{loss};
//   });
//
//   // On the coordinator:
//   ls::distribute::ClusterCoordinator coordinator(strategy);
//   auto it = coordinator.create_per_worker_dataset("train_data").iter();
//   for (int i = 0; i < 100; ++i) coordinator.schedule("step", {it});
//   coordinator.join();
//
// Failures (as TensorFlow's): a function on a worker that dies is put back
// and run again on another worker (at least once); a worker that comes
// back rejoins, and its datasets are rebuilt; a lost parameter server is an
// UnavailableError naming it; the first error of a scheduled function is
// raised once, from schedule(), join() or done(), with the worker's name,
// and the functions still waiting are cancelled (their fetch() raises a
// CancelledError).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/parameter_server_strategy.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

class WorkerContext;

// A function workers run: its results are the scheduled call's RemoteValue.
using WorkerFunction = std::function<std::vector<Tensor>(WorkerContext& context)>;
// A dataset a worker builds for itself (create_per_worker_dataset): `context`
// says which of the workers' pipelines it is; `arguments` are the
// coordinator's.
using DatasetFunction =
    std::function<data::Dataset(const InputContext& context, const std::vector<Tensor>& arguments)>;

// Registers a function by name in this process (every process of the job
// registers the same ones). A name registered twice is a ValueError.
void register_worker_function(const std::string& name, WorkerFunction fn);
void register_dataset_function(const std::string& name, DatasetFunction fn);
// The dataset a registered dataset function makes (a ValueError naming the
// registered ones when there is none of that name).
data::Dataset make_registered_dataset(const std::string& name, const InputContext& context,
                                      const std::vector<Tensor>& arguments);

// Model::fit's input under ParameterServerStrategy when every worker builds
// its own (tf.keras.utils.experimental.DatasetCreator): a registered dataset
// function, called on each worker with its InputContext. The dataset should
// repeat(): fit takes steps_per_epoch batches per epoch from it.
struct DatasetCreator {
  std::string dataset_fn{};
  std::vector<Tensor> arguments{};
};

// A per-worker iterator (iter() of a PerWorkerDataset): as an argument of a
// scheduled function it is the running worker's own iterator.
class PerWorkerIterator {
 public:
  std::int64_t id() const { return id_; }

 private:
  friend class PerWorkerDataset;
  std::int64_t id_ = -1;
};

// A dataset built on every worker by a registered dataset function.
class PerWorkerDataset {
 public:
  // A new iterator on every worker (rebuilt when a worker rejoins).
  PerWorkerIterator iter() const;

 private:
  friend class ClusterCoordinator;
  std::shared_ptr<class CoordinatorImpl> coordinator_;
  std::string function_;
  std::vector<Tensor> arguments_;
};

// An argument of a scheduled function: a tensor (sent as it is) or a
// per-worker iterator.
class RemoteArgument {
 public:
  RemoteArgument(Tensor tensor) : tensor_(std::move(tensor)) {}  // NOLINT: as TF's args
  RemoteArgument(const PerWorkerIterator& iterator) : iterator_(iterator.id()) {}  // NOLINT
  const Tensor& tensor() const { return tensor_; }
  std::int64_t iterator() const { return iterator_; }  // -1: a tensor

 private:
  Tensor tensor_;
  std::int64_t iterator_ = -1;
};

struct RemoteValueState;

// The result of a scheduled function, available once it has run. A handle:
// copies share it; thread-safe.
class RemoteValue {
 public:
  // Waits for the function and returns its results; raises its error (with
  // the worker's name), or a CancelledError if it never ran.
  std::vector<Tensor> fetch() const;
  // The single result (a ValueError if the function returned another count).
  Tensor get() const;
  // Whether it has finished (run, failed or cancelled), without waiting.
  bool done() const;

 private:
  friend class CoordinatorImpl;
  std::shared_ptr<RemoteValueState> state_;
};

// Counts of scheduled functions, for tests and benchmarks.
struct CoordinatorStats {
  std::int64_t scheduled = 0;
  std::int64_t completed = 0;  // returned results
  std::int64_t failed = 0;
  std::int64_t cancelled = 0;
  std::int64_t rerun = 0;           // put back because their worker was lost
  std::int64_t worker_rejoins = 0;  // workers seen again after they were lost (or restarted)
};

class CoordinatorImpl;

class ClusterCoordinator {
 public:
  // The strategy's one coordinator (every ClusterCoordinator of a strategy
  // is a handle to it, as TensorFlow allows one). Its dispatchers — one per
  // worker — start here.
  explicit ClusterCoordinator(const ParameterServerStrategy& strategy);

  // Queues a call of the registered function `name` and returns at once.
  // Blocks while the queue is full. Raises the first error of an earlier
  // function, once.
  RemoteValue schedule(const std::string& name, std::vector<RemoteArgument> arguments = {});
  // Waits for every scheduled function; raises the first error, once.
  void join();
  // Whether every scheduled function has finished; raises the first error,
  // once.
  bool done();
  // fetch() of each value.
  std::vector<std::vector<Tensor>> fetch(const std::vector<RemoteValue>& values) const;

  // The registered dataset function `name`, built on every worker.
  PerWorkerDataset create_per_worker_dataset(const std::string& name,
                                             std::vector<Tensor> arguments = {});
  // Runs the registered function `name` on every worker before that
  // worker's next function, and again whenever a worker rejoins (for what a
  // worker builds once: a model).
  void create_per_worker_resource(const std::string& name, std::vector<Tensor> arguments = {});

  CoordinatorStats stats() const;

 private:
  std::shared_ptr<CoordinatorImpl> impl_;
};

class WorkerState;

// What a function running on a worker is given: its arguments, its
// worker's iterators and resources, and the coordinator's variables.
// Valid during the call only; resources and bindings last for the process.
class WorkerContext {
 public:
  WorkerContext(WorkerState& state, std::vector<Tensor> tensors,
                std::vector<std::int64_t> iterators)
      : state_(state), tensors_(std::move(tensors)), iterators_(std::move(iterators)) {}

  int worker_index() const;
  int num_workers() const;
  // "worker 1 (127.0.0.1:2223)"
  const std::string& task() const;
  std::size_t num_arguments() const { return tensors_.size(); }
  // Argument i, a tensor (a ValueError if it is an iterator).
  const Tensor& argument(std::size_t i) const;
  // The next element of the per-worker iterator given as argument i; the
  // end of its data is an IndexError (repeat() the dataset).
  data::Element next(std::size_t i);

  // Binds local variables to the coordinator's: vars[k] is the variable the
  // coordinator made (k + first)-th in its strategy's scope, or
  // indices[k]-th. Shapes and dtypes must match (a ShapeError naming
  // both). From then on the worker reads their values from the parameter
  // servers before each function runs (read_variables), and
  // optimizer.apply_gradients on them sends the gradients there.
  void bind_variables(const std::vector<Variable>& vars, std::int64_t first = 0);
  void bind_variables(const std::vector<Variable>& vars, const std::vector<std::int64_t>& indices);
  // The bound variables take the parameter servers' values again. Done
  // before every function; a function of several steps calls it between
  // them (fit does, with steps_per_execution > 1) to read the updates its
  // own and the other workers' steps have made meanwhile.
  void read_variables();
  // The parameter servers take these bound variables' local values (state
  // a step assigns rather than trains: BatchNormalization's moving
  // statistics; the last writer wins, as in TensorFlow).
  void write_variables(const std::vector<Variable>& vars);
  // The coordinator's variables (name, shape) in creation order.
  std::vector<std::pair<std::string, Shape>> coordinator_variables() const;

  // What the worker process keeps between calls, by key (null: none yet).
  template <typename T>
  std::shared_ptr<T> resource(const std::string& key) const {
    return std::static_pointer_cast<T>(resource_ptr(key));
  }
  template <typename T>
  void set_resource(const std::string& key, std::shared_ptr<T> value) {
    set_resource_ptr(key, std::static_pointer_cast<void>(std::move(value)));
  }

 private:
  std::shared_ptr<void> resource_ptr(const std::string& key) const;
  void set_resource_ptr(const std::string& key, std::shared_ptr<void> value);

  WorkerState& state_;
  std::vector<Tensor> tensors_;
  std::vector<std::int64_t> iterators_;  // per argument; -1: a tensor
};

struct ServerOptions {
  std::string job_token{};  // empty: LOCKSTEP_JOB_TOKEN
  int threads = 4;          // a worker's pool for its calls (a ps task answers on gRPC's threads)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // a worker's calls to ps tasks
};

// Serves this process's task of a ParameterServerStrategy job
// (tf.distribute.Server): a ps task holds variables, a worker task runs
// registered functions. Binds the task's own address from TF_CONFIG.
class Server {
 public:
  explicit Server(const ClusterResolver& resolver, ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  int port() const;
  // Blocks until the coordinator says the job is over.
  void join();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::distribute
