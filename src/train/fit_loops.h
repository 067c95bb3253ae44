// What fit_loops.cc (the loops of fit / evaluate / predict) and ps_fit.cc
// (fit under ParameterServerStrategy) share: the callback list and the
// loops' declarations. Internal to train/.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batch_sources.h"
#include "lockstep/distribute/cluster_coordinator.h"
#include "lockstep/train/model.h"
#include "model_internal.h"

namespace lockstep {
namespace detail {

// Where fit is (for checkpoints): `step` batches of `epoch` done, the input
// at `input`, and the metric and random states now.
TrainingSnapshot snapshot_at(const Model& m, int epoch, std::int64_t step,
                             data::IteratorState input);

// The live bar needs a terminal, and one writer: verbose 1 prints the
// one-line form where stdout is no terminal, and on a worker that is not the
// chief (mpirun gives every rank a terminal of its own even when its output
// goes to a file, and each rank drew its bar into it: issue #38).
int effective_verbose(int verbose, bool chief);

struct CallbackList {
  std::vector<std::shared_ptr<Callback>> all;
  std::shared_ptr<History> history;
  template <typename F>
  void each(F&& f) {
    for (auto& cb : all) f(*cb);
  }
};

// The user's callbacks, then (as Keras) History and the progress logger.
CallbackList make_callbacks(const std::vector<std::shared_ptr<Callback>>& user, Model* model,
                            const CallbackParams& params, bool add_history);

// Ends fit's snapshot of where training is, however fit ends.
struct ForgetSnapshot {
  Model::TrainState& s;
  ~ForgetSnapshot() {
    s.snapshot = nullptr;
    s.resume.reset();
  }
};

}  // namespace detail

struct Model::Loops {
  using CallbackList = detail::CallbackList;
  using Batch = detail::Batch;
  using BatchSource = detail::BatchSource;
  static History fit(Model& m, BatchSource& train, const std::optional<ValidationData>& val,
                     const FitOptions& o);
  static Logs evaluate(Model& m, BatchSource& source, const EvaluateOptions& o);
  static std::vector<Tensor> predict(Model& m, BatchSource& source, const PredictOptions& o);
  // One pass over `source` with test_step (evaluate, and fit's validation);
  // errors are prefixed with `op` and the batch.
  static Logs test_pass(Model& m, BatchSource& source, CallbackList& callbacks,
                        const std::string& op);
  // fit's parts: its validation batches (none without validation data), and
  // one epoch's training batches from `done` on (advanced as they are done).
  static std::unique_ptr<BatchSource> validation_source(Model& m,
                                                        const std::optional<ValidationData>& val,
                                                        const FitOptions& o);
  static void train_epoch(Model& m, BatchSource& train, CallbackList& callbacks, int epoch,
                          std::int64_t& done);

  // ---- The one epoch driver of fit and the parameter-server fit ----
  // What differs between them: where the input's state comes from, how an
  // epoch's batches run, what happens after them. run_epochs does the rest
  // (the snapshot callbacks take, resuming from one, metrics, validation,
  // callbacks, stopping) the same way for both.
  struct EpochSteps {
    // The training input's state for a snapshot at the start of `epoch`
    // after `done` batches.
    std::function<data::IteratorState(int epoch, bool full_input_state)> input_state;
    // Runs before a snapshot is taken (fit: merge the replicas' metrics).
    std::function<void()> before_snapshot{};
    // Checks a resume point this fit can take, and may move it (the
    // parameter-server fit restarts the epoch at its first batch).
    std::function<void(TrainingSnapshot&)> check_resume{};
    // After on_epoch_begin, before the batches (the parameter-server fit:
    // the optimizer's settings are unchanged).
    std::function<void(int epoch)> begin_epoch{};
    // Runs epoch `epoch`'s batches, from `done` on (non-zero when resuming
    // in the middle of it); `resume_input` is the input's state to resume
    // from, null when the epoch starts afresh. Advances `done`.
    std::function<void(int epoch, const data::IteratorState* resume_input, std::int64_t& done)>
        run_epoch;
    // After the epoch's metrics are read, before validation (the
    // parameter-server fit: pull the weights, report staleness).
    std::function<void(int epoch, Logs& logs)> end_epoch{};
  };
  static History run_epochs(Model& m, CallbackList& callbacks, BatchSource* val_source,
                            const FitOptions& o, const EpochSteps& steps);

  // ---- Where strategy meets model ----
  static bool distributed(const Model& m) { return !m.state().strategy.is_default(); }
  // How many step graphs fit keeps (train/step_graph.h): one per local
  // replica where the replicas may record their steps, else none.
  static int records_steps(const Model& m);
  // Under a multi-worker strategy, whether every worker has a next batch:
  // an epoch ends for all when one runs out (uneven input never hangs).
  static bool all_workers_have_batch(Model& m, std::optional<Batch>& batch);
  // Every worker must train the same model with the same optimizer on
  // input of the same length; a mismatch is named on every worker.
  static void check_workers_agree(Model& m, const char* op, std::int64_t steps);
  static void prepare_replicas(Model& m, const char* op);
  // A global batch cut into each replica's share (zero-copy views).
  struct Shares {
    std::int64_t global = 0;
    std::vector<std::int64_t> sizes;
    std::vector<std::vector<Tensor>> x, y;
  };
  static Shares share_out(Model& m, const Batch& b);
  static Logs train_batch(Model& m, const Batch& b);
  // Model's own train_step before its metrics — forward, loss, backward,
  // the optimizer's update — returning what updates the metrics from its
  // outputs (train_step runs it at once; a recorded step after each replay).
  static std::function<void()> train_step_body(Model& m, const std::vector<Tensor>& x,
                                               const std::vector<Tensor>& y);
  static Logs test_batch(Model& m, const Batch& b);
  static std::vector<Tensor> predict_batch(Model& m, const Batch& b);
  static void build_before_replicas(Model& m, const std::vector<Tensor>& x);

  // ---- Under ParameterServerStrategy (ps_fit.cc) ----
  // fit's epochs as functions scheduled on the workers, the input built on
  // each worker (`creator`) or read here (`source`, its batches sent with
  // each function).
  static History fit_on_parameter_servers(Model& m, const distribute::DatasetCreator* creator,
                                          BatchSource* source,
                                          const std::optional<ValidationData>& val,
                                          const FitOptions& o);
};

}  // namespace lockstep
