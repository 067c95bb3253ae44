// This worker's stream of batches from one dataset under a strategy: the
// dataset's auto-shard policy applied (StrategyExtended::auto_shard); under
// FILE and OFF across workers each batch of this worker's pipeline is cut
// into one part per worker, taken one per step (tf.distribute's
// rebatching). Its position saves as a replay count (every worker has taken
// as many steps as the chief, so the chief's count replays each worker's
// own pipeline) or, with one part, as the iterator's whole state. fit's
// input and a custom loop's experimental_distribute_dataset read through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/data/dataset.h"

namespace lockstep::distribute {

class Strategy;

class WorkerBatches {
 public:
  // Without a strategy, or with one worker, the dataset as it is. `op` names
  // the caller in errors ("fit", "experimental_distribute_dataset").
  WorkerBatches(const Strategy* strategy, data::Dataset dataset, std::string op);

  // The same stream, not started (one per iteration of a dataset).
  WorkerBatches unstarted_copy() const;

  // The dataset this worker reads (sharded by FILE), and how many parts
  // each of its batches is cut into (1, or the workers under FILE / OFF).
  const data::Dataset& dataset() const { return dataset_; }
  int parts() const { return parts_; }
  // Whether next() gives this worker's part of a global batch (its rows go
  // to its replicas, all of them) rather than the global batch itself.
  bool worker_part() const { return parts_ > 1; }

  // A new iterator, keyed by `epoch_key` (every random choice of the
  // pipeline is a function of its seeds and this key: data/dataset.h).
  void start(std::uint64_t epoch_key);
  bool started() const { return it_.has_value(); }
  // The next batch (or part of one); nullopt when this worker's input ends.
  std::optional<data::Element> next();
  // Elements of the dataset read so far (the current one included).
  std::int64_t elements_read() const;

  // Where the stream is, as little as replaying it needs.
  struct Position {
    std::uint64_t epoch_key = 0;
    std::int64_t elements = 0;  // elements read
    int part = 0;               // the next part of the element being cut
  };
  Position position() const;
  // A new iterator at `p`, by reading again what was read before it: a
  // ValueError naming the op when the dataset ends sooner.
  void restore(const Position& p);
  // The iterator's whole state (shuffle buffers and all): one part only,
  // since under FILE / OFF each worker's pipeline is its own.
  data::IteratorState save_full();
  void restore_full(std::uint64_t epoch_key, const data::IteratorState& state);

 private:
  WorkerBatches() = default;
  std::string op_;
  data::Dataset dataset_;
  int parts_ = 1;
  std::optional<data::Iterator> it_;
  std::uint64_t epoch_key_ = 0;
  // FILE / OFF: the element being cut into parts, and the next part.
  std::optional<data::Element> current_;
  int part_ = 0;
};

}  // namespace lockstep::distribute
