// Where the batches of fit / evaluate / predict come from: tensors sliced in
// memory (shuffled per epoch or not), or a Dataset read through
// distribute's WorkerBatches (the auto-shard policy of a multi-worker
// strategy); each writes its position into a checkpoint's JSON and back.
// Internal to train/ (fit_loops.cc, ps_fit.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/checked.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/worker_batches.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "model_internal.h"

namespace lockstep::detail {

// A saved input position's JSON tree; a ValueError naming `op` when it does
// not parse (a damaged or foreign checkpoint).
inline nlohmann::json parse_position(const data::IteratorState& st, const std::string& op) {
  check_json_nesting(st.json, op + ": the saved input position");
  nlohmann::json j = nlohmann::json::parse(st.json, nullptr, /*allow_exceptions=*/false);
  LOCKSTEP_CHECK(!j.is_discarded() && j.is_object(), op,
                 ": the saved input position is not a JSON object ('", st.json.substr(0, 80), "')");
  return j;
}

// Rows `idx` of t (a copy), or rows [begin, end) as a view when idx is empty.
inline Tensor take_rows(const Tensor& t, const std::vector<std::int64_t>& order, std::int64_t begin,
                        std::int64_t end) {
  if (order.empty()) return t.view_rows(begin, end);
  std::vector<std::int64_t> idx(order.begin() + begin, order.begin() + end);
  return gather(t, Tensor::from_vector(idx), 0);
}

inline std::vector<Tensor> rows_of(const std::vector<Tensor>& ts,
                                   const std::vector<std::int64_t>& order, std::int64_t begin,
                                   std::int64_t end) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(take_rows(t, order, begin, end));
  return out;
}

struct Batch {
  std::vector<Tensor> x, y;
  std::string where;  // for error messages: " (examples 64 to 127)"
  // -1: x and y are the global batch (every worker holds it and keeps its
  // replicas' rows). Otherwise they are this worker's part only (auto-shard
  // FILE / OFF) and this is the global batch's size, summed across workers.
  std::int64_t global_rows = -1;
  bool worker_part = false;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches per epoch; 0 when unknown until the data ends.
  virtual std::int64_t steps() const = 0;
  virtual void start_epoch(int epoch) = 0;
  virtual std::optional<Batch> next(std::int64_t step) = 0;
  // The position after the batches of `epoch` taken so far, and back. Not
  // `full`: as little as replaying the input needs (Keras's way: skip the
  // batches already used); `full`: the input's whole state (shuffle buffers
  // and all), exact even for non-deterministic pipelines.
  virtual data::IteratorState save_state(int epoch, bool full) = 0;
  // Positions the source at `step` batches into `epoch` (instead of
  // start_epoch), from save_state's result.
  virtual void restore_state(int epoch, std::int64_t step, const data::IteratorState& state) = 0;
};

class TensorBatches final : public BatchSource {
 public:
  TensorBatches(std::vector<Tensor> x, std::vector<Tensor> y, std::int64_t batch_size,
                std::int64_t steps, bool shuffle)
      : x_(std::move(x)),
        y_(std::move(y)),
        n_(x_.at(0).shape()[0]),
        batch_size_(batch_size),
        steps_(steps > 0 ? steps : (n_ + batch_size - 1) / batch_size),
        shuffle_(shuffle) {
    if (shuffle_) {
      seed_ = detail::next_global_random_key().first ^ 0x5eed5eed5eedULL;
      stream_ = detail::next_global_random_key().second << 20;
    }
  }
  std::int64_t steps() const override { return steps_; }
  void start_epoch(int epoch) override {
    if (shuffle_)
      order_ = random::permutation_indices(n_, seed_, stream_ + static_cast<std::uint64_t>(epoch));
  }
  data::IteratorState save_state(int epoch, bool) override {
    const nlohmann::json j = {{"source", "tensors"}, {"examples", n_}, {"batch_size", batch_size_},
                              {"shuffle", shuffle_}, {"seed", seed_},  {"stream", stream_},
                              {"epoch", epoch}};
    return {.json = j.dump()};
  }
  void restore_state(int epoch, std::int64_t, const data::IteratorState& st) override {
    const nlohmann::json j = parse_position(st, "fit");
    LOCKSTEP_CHECK(
        j.value("source", "") == "tensors" && j.value("examples", -1) == n_ &&
            j.value("batch_size", -1) == batch_size_ && j.value("shuffle", !shuffle_) == shuffle_,
        "fit: the saved input position is for other data (", j.dump(), "); this fit has ", n_,
        " examples in batches of ", batch_size_, shuffle_ ? ", shuffled" : "");
    seed_ = j.at("seed").get<std::uint64_t>();
    stream_ = j.at("stream").get<std::uint64_t>();
    start_epoch(epoch);
  }
  std::optional<Batch> next(std::int64_t step) override {
    if (step >= steps_) return std::nullopt;
    const std::int64_t begin = step * batch_size_, end = std::min(n_, begin + batch_size_);
    return Batch{rows_of(x_, order_, begin, end), rows_of(y_, order_, begin, end),
                 " (examples " + std::to_string(begin) + " to " + std::to_string(end - 1) + ")"};
  }

 private:
  std::vector<Tensor> x_, y_;
  std::int64_t n_, batch_size_, steps_;
  bool shuffle_;
  std::uint64_t seed_ = 0, stream_ = 0;
  std::vector<std::int64_t> order_;
};

inline std::vector<std::string> input_names(const LayerImpl& net) {
  std::vector<std::string> names;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    for (const KerasTensor& in : f->inputs()) names.push_back(in.node()->input_name);
  }
  return names;
}

inline std::size_t declared_inputs(const LayerImpl& net) {
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) return f->inputs().size();
  return 1;
}

class DatasetBatches final : public BatchSource {
 public:
  // `needs_targets`: fit / evaluate; predict takes the inputs only.
  // `strategy`: under a multi-worker strategy the dataset's auto-shard
  // policy applies (null: every worker reads all of it, as predict does).
  DatasetBatches(const char* op, data::Dataset ds, const LayerImpl& net, std::int64_t steps,
                 bool needs_targets, const distribute::Strategy* strategy = nullptr)
      : op_(op),
        input_(strategy, std::move(ds), op),
        n_in_(declared_inputs(net)),
        n_out_(declared_outputs(net)),
        in_names_(input_names(net)),
        out_names_(output_names(net, declared_outputs(net))),
        fixed_steps_(steps),
        needs_targets_(needs_targets) {
    const std::int64_t c = input_.dataset().cardinality();
    LOCKSTEP_CHECK(steps > 0 || c != data::kInfiniteCardinality, op_,
                   ": the dataset is infinite (repeat() without a count); give steps_per_epoch "
                   "(or steps) to say how many batches make an epoch");
    LOCKSTEP_CHECK(c != 0, op_, ": the dataset is empty");
    steps_ = steps > 0 ? steps : (c > 0 ? c * input_.parts() : 0);
  }
  std::int64_t steps() const override { return steps_; }
  void start_epoch(int epoch) override {
    // Without a step count every epoch is a full pass over a new iterator
    // (keyed by the epoch); with one, a single iterator runs on across epochs.
    if (fixed_steps_ == 0 || !input_.started()) input_.start(static_cast<std::uint64_t>(epoch));
  }
  std::optional<Batch> next(std::int64_t step) override {
    if (steps_ > 0 && step >= steps_) return std::nullopt;
    std::optional<data::Element> e = input_.next();
    if (!e) {
      exhausted_ = fixed_steps_ > 0;
      return std::nullopt;
    }
    Batch b = split(*e);
    b.worker_part = input_.worker_part();
    return b;
  }
  // A fixed step count that the data could not supply.
  bool exhausted() const { return exhausted_; }

  data::IteratorState save_state(int, bool full) override {
    const distribute::WorkerBatches::Position p = input_.position();
    if (!full) {
      nlohmann::json j = {
          {"source", "dataset"}, {"iterator_epoch", p.epoch_key}, {"replay", p.elements}};
      if (input_.parts() > 1) j["part"] = p.part;
      return {.json = j.dump()};
    }
    data::IteratorState st = input_.save_full();
    const nlohmann::json j = {{"source", "dataset"},
                              {"iterator_epoch", p.epoch_key},
                              {"iterator", nlohmann::json::parse(st.json)}};
    st.json = j.dump();
    return st;
  }
  void restore_state(int epoch, std::int64_t step, const data::IteratorState& st) override {
    const nlohmann::json j = parse_position(st, op_);
    LOCKSTEP_CHECK(j.value("source", "") == "dataset", op_,
                   ": the saved input position is not a dataset's (", st.json, ")");
    if (fixed_steps_ == 0 && step == 0) {
      start_epoch(epoch);  // a whole new pass: nothing to restore
      return;
    }
    const auto key = j.at("iterator_epoch").get<std::uint64_t>();
    if (j.contains("replay")) {
      input_.restore({.epoch_key = key,
                      .elements = j.at("replay").get<std::int64_t>(),
                      .part = j.value("part", 0)});
      return;
    }
    input_.restore_full(key, {j.at("iterator").dump(), st.tensors});
  }

 private:
  Batch split(const data::Element& e) const {
    Batch b;
    b.where = " (dataset element " + std::to_string(input_.elements_read() - 1) + ")";
    auto named = [&](const std::vector<std::string>& names, std::vector<Tensor>& out) {
      if (e.names().empty() || names.empty()) return false;
      for (const auto& n : names) {
        if (std::find(e.names().begin(), e.names().end(), n) == e.names().end()) return false;
      }
      for (const auto& n : names) out.push_back(e[n]);
      return true;
    };
    if (named(in_names_, b.x)) {
      if (needs_targets_) {
        if (!named(out_names_, b.y)) {
          // The components that are not inputs, in order.
          for (std::size_t i = 0; i < e.size(); ++i) {
            if (std::find(in_names_.begin(), in_names_.end(), e.names()[i]) == in_names_.end())
              b.y.push_back(e[i]);
          }
        }
        LOCKSTEP_CHECK(b.y.size() == n_out_, op_, ": the dataset's elements name the inputs but ",
                       "hold ", b.y.size(), " other components for the model's ", n_out_,
                       " outputs");
      }
      return b;
    }
    const std::size_t want = n_in_ + (needs_targets_ ? n_out_ : 0);
    LOCKSTEP_CHECK(e.size() == want || (!needs_targets_ && e.size() == n_in_ + n_out_), op_,
                   ": the model has ", n_in_, " input(s) and ", n_out_,
                   " output(s), so dataset elements must hold ", want,
                   needs_targets_ ? " components (inputs, then targets)" : " input components",
                   "; got ", e.size());
    b.x.assign(e.components().begin(), e.components().begin() + static_cast<std::ptrdiff_t>(n_in_));
    if (needs_targets_)
      b.y.assign(e.components().begin() + static_cast<std::ptrdiff_t>(n_in_), e.components().end());
    return b;
  }

  const char* op_;
  distribute::WorkerBatches input_;
  std::size_t n_in_, n_out_;
  std::vector<std::string> in_names_, out_names_;
  std::int64_t fixed_steps_, steps_ = 0;
  bool needs_targets_;
  bool exhausted_ = false;
};

}  // namespace lockstep::detail
