// Dataset: a tf.data-style input pipeline.
//
//   auto [train, test] = ls::datasets::fashion_mnist::load_data();
//   auto ds = ls::data::Dataset::from_tensor_slices({train.first, train.second})
//                 .map(normalize, {.num_parallel_calls = ls::data::kAutotune})
//                 .cache()
//                 .shuffle(60000, {.seed = 42})
//                 .batch(64)
//                 .prefetch(ls::data::kAutotune);
//   for (const auto& batch : ds) { ... batch[0], batch[1] ... }
//
// A Dataset is an immutable description (a cheap handle); iterating it makes
// an Iterator. Sources and transformations are those of tf.data (see
// docs/data.md for the list and the differences).
//
// Determinism. Everything random in a pipeline is a pure function of the
// seeds and of the *iteration key* the iterator was made with: `repeat` gives
// each pass its own key, and `make_iterator({.epoch = e})` (what Model::fit
// does each epoch) gives each epoch its own. So a seeded `shuffle` reshuffles
// every epoch and yet epoch e's order is the same in every run — which is what
// makes an exact resume possible. An unseeded shuffle draws its seed once,
// when the Dataset is made, and iterator states record it.
//
// Iterator state. Iterator::save() captures everything needed to continue:
// positions, seeds, the shuffle buffer and prefetched elements (as tensors),
// repeat counts. Restoring it into a fresh iterator of the same pipeline
// yields exactly the elements the saved one would have produced next.
//
// Threads. prefetch, map with num_parallel_calls and interleave with
// num_parallel_calls run on background threads owned by the iterator; they
// are joined when the iterator is destroyed. An exception thrown by a map
// function, a generator or a reader reaches the consumer, in element order,
// with its message.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/element.h"

namespace lockstep::data {

// num_parallel_calls / buffer_size: let the pipeline choose (tf.data.AUTOTUNE).
inline constexpr std::int64_t kAutotune = -1;
// tf.data's own spelling, for ports written line by line.
inline constexpr std::int64_t AUTOTUNE = kAutotune;  // NOLINT(readability-identifier-naming)
// cardinality() results.
inline constexpr std::int64_t kInfiniteCardinality = -1;
inline constexpr std::int64_t kUnknownCardinality = -2;

// Bytes that autotuned buffers (prefetch, parallel map) may hold in total.
// Default 256 MiB.
void set_autotune_memory_budget(std::size_t bytes);
std::size_t autotune_memory_budget();

// Everything an iterator needs to continue where it stopped: the JSON text
// of a tree of positions, seeds and counts, and the buffered elements as
// named tensors (the checkpoint writer stores both). Only data/ reads the
// tree; for everyone else it is opaque text to keep and give back.
struct IteratorState {
  std::string json = "{}";
  std::map<std::string, Tensor> tensors{};
};

class IteratorImpl;
class DatasetImpl;

struct IteratorOptions {
  // The epoch (or any caller-chosen pass number) this iteration is for; it
  // keys every reshuffle (see "Determinism" above).
  std::uint64_t epoch = 0;
};

class Iterator {
 public:
  Iterator() = default;
  // `dataset` is kept alive as long as the iterator (iterators refer to it).
  Iterator(std::shared_ptr<const DatasetImpl> dataset, std::unique_ptr<IteratorImpl> impl);
  ~Iterator();
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;

  // The next element, or nullopt at the end (and at every call after it).
  std::optional<Element> next();
  // The next element; IndexError "end of sequence" past the end.
  Element get_next();
  // Elements produced so far (restored by restore()).
  std::int64_t position() const { return position_; }

  IteratorState save();
  // `state` must come from save() on an iterator of the same pipeline;
  // a state from another pipeline is a ValueError naming where they differ.
  void restore(const IteratorState& state);

 private:
  std::shared_ptr<const DatasetImpl> dataset_;  // declared first: destroyed after impl_
  std::unique_ptr<IteratorImpl> impl_;
  std::int64_t position_ = 0;
};

struct ShuffleOptions {
  std::optional<std::uint64_t> seed{};   // none: drawn once per Dataset
  bool reshuffle_each_iteration = true;  // a new order every epoch / repeat pass
};

struct MapOptions {
  // 1 (or 0): on the consumer's thread. N > 1: N worker threads.
  // kAutotune: workers chosen from the measured map and consumer times.
  std::int64_t num_parallel_calls = 1;
  // false: a parallel map may deliver elements as they finish.
  bool deterministic = true;
};

struct InterleaveOptions {
  std::int64_t cycle_length = kAutotune;  // kAutotune: the number of cores
  std::int64_t block_length = 1;
  // > 1 or kAutotune: each open input is read ahead on its own thread.
  std::int64_t num_parallel_calls = 1;
};

struct PaddedBatchOptions {
  bool drop_remainder = false;
  double padding_value = 0.0;
};

using MapFunction = std::function<Element(const Element&)>;
using Predicate = std::function<bool(const Element&)>;
// Returns the next element, or nullopt at the end.
using Generator = std::function<std::optional<Element>()>;

// How a MultiWorkerMirroredStrategy splits a dataset across its workers
// (tf.data's AutoShardPolicy), set with Dataset::with_options.
enum class AutoShardPolicy {
  // FILE when the pipeline reads a file list (from_files / list_files) with
  // at least one file per worker, else DATA.
  kAuto,
  // Each worker reads its own files (the file list sharded by worker) and
  // every batch it makes is cut into one part per worker, taken one per step.
  kFile,
  // Every worker reads the whole input and keeps its replicas' rows of each
  // global batch: the global batches are exactly one process's.
  kData,
  // No sharding: every worker reads its own copy of the input, cut into
  // parts per step as with FILE.
  kOff,
};

struct DistributeOptions {
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;
};

struct Options {
  DistributeOptions experimental_distribute{};
};

struct PrefetchToDeviceOptions {
  // Elements copied ahead and not yet taken.
  std::int64_t buffer_size = 1;
  // Wait after each element's copies on the device until they have run, so
  // that replicas on other streams of the same GPU (logical GPUs) may read
  // the element: what fit and DistributedDataset ask for several replicas.
  bool synchronize = false;
};

// What prefetch_to_device's consumers (fit's replicas, a custom loop's
// distributed dataset) waited for, process-wide since the start or the last
// reset: the elements they took, and the seconds they spent waiting for one
// that was not on its device yet — the time a step's device stood idle for
// its input (docs/data.md, "Input copied ahead").
struct DevicePrefetchStats {
  std::int64_t elements = 0;
  std::int64_t waits = 0;  // elements that were not ready when asked for
  double seconds_waited = 0;
};
DevicePrefetchStats device_prefetch_stats();
void reset_device_prefetch_stats();

class Dataset {
 public:
  Dataset() = default;
  explicit Dataset(std::shared_ptr<const DatasetImpl> impl) : impl_(std::move(impl)) {}

  // ---- Sources ----
  // Element i is (components[0][i], components[1][i], ...): zero-copy views.
  // All components must have the same size along dimension 0.
  static Dataset from_tensor_slices(std::vector<Tensor> components,
                                    std::vector<std::string> names = {});
  static Dataset from_tensor_slices(const Tensor& tensor);
  // One element: the tensors themselves.
  static Dataset from_tensors(Element element);
  // Plain numbers, as tf.data.Dataset.from_tensors([1, 2, 3]): one element,
  // a vector (int32 for whole numbers, float32 for fractions, as TF).
  static Dataset from_tensors(std::initializer_list<int> values);
  static Dataset from_tensors(std::initializer_list<float> values);
  // int64 scalars start, start + step, ... before stop (Python's range).
  static Dataset range(std::int64_t stop);
  static Dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);
  // `make` is called for every iteration and returns the generator for it.
  // Iterator state records the count produced; restoring calls `make` and
  // skips that many, so the generator must be deterministic to resume exactly.
  static Dataset from_generator(std::function<Generator()> make,
                                std::int64_t cardinality = kUnknownCardinality);
  // Elements are the components of each dataset's element, side by side;
  // ends with the shortest.
  static Dataset zip(std::vector<Dataset> datasets);
  // One element per path (a uint8 byte tensor; Element::string reads it).
  static Dataset from_files(std::vector<std::string> paths);
  // Files matching a glob pattern, sorted; shuffled when `shuffle`.
  static Dataset list_files(const std::string& pattern, bool shuffle = false,
                            std::optional<std::uint64_t> seed = std::nullopt);

  // ---- Transformations ----
  Dataset concatenate(const Dataset& other) const;
  Dataset map(MapFunction fn, MapOptions options = {}) const;
  Dataset filter(Predicate predicate) const;
  // Stacks batch_size consecutive elements along a new dimension 0. The last
  // batch is smaller unless drop_remainder.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  // As batch, padding each component to the largest shape in the batch.
  Dataset padded_batch(std::int64_t batch_size, PaddedBatchOptions options = {}) const;
  // Splits each element along dimension 0 (zero-copy).
  Dataset unbatch() const;
  Dataset shuffle(std::int64_t buffer_size, ShuffleOptions options = {}) const;
  // count < 0: forever.
  Dataset repeat(std::int64_t count = -1) const;
  Dataset take(std::int64_t count) const;
  Dataset skip(std::int64_t count) const;
  // Every num_shards-th element starting at index.
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  // Prepends an int64 scalar counter component.
  Dataset enumerate(std::int64_t start = 0) const;
  // filename empty: in memory. Otherwise the first complete pass writes the
  // file atomically and later passes (and later runs) read it.
  Dataset cache(const std::string& filename = "") const;
  Dataset prefetch(std::int64_t buffer_size = kAutotune) const;
  // The elements' tensors on `device`, copied ahead of their use
  // (tf.data.experimental.prefetch_to_device): a background thread reads
  // the input and sends each element while the device computes — on a GPU
  // from page-locked memory on a copy stream of its own, so that a step
  // never waits for its batch to cross the bus. Make it the last
  // transformation. Tensors already on an accelerator pass as they are; on
  // a CPU device this is prefetch(buffer_size). fit, evaluate and
  // DistributedDataset add it themselves when the replicas run on
  // accelerators (tf.distribute's InputOptions.experimental_fetch_to_device).
  Dataset prefetch_to_device(Device& device, PrefetchToDeviceOptions options = {}) const;
  // By name: "/gpu:0", "GPU:1", "/job:localhost/replica:0/task:0/device:GPU:0".
  Dataset prefetch_to_device(const std::string& device, std::int64_t buffer_size = 1) const;
  // Maps each element to a dataset and interleaves their elements: cycle_length
  // inputs open at once, block_length elements from each in turn.
  Dataset interleave(std::function<Dataset(const Element&)> fn,
                     InterleaveOptions options = {}) const;

  // Known size, kInfiniteCardinality or kUnknownCardinality.
  std::int64_t cardinality() const;

  // The same elements, with options attached (tf.data's with_options). Like
  // the guide, call it last: it is the outermost options that fit reads.
  Dataset with_options(Options options) const;
  Options options() const;
  // This pipeline with its file list (from_files / list_files) replaced by
  // shard(num_shards, index) of it, for FILE auto-sharding; an undefined
  // Dataset when there is no file list, fewer files than shards, or a
  // transformation in the way (zip, concatenate, cache to a file).
  Dataset with_sharded_files(std::int64_t num_shards, std::int64_t index) const;

  Iterator make_iterator(IteratorOptions options = {}) const;

  // Range-for support: `for (const Element& e : dataset)`.
  class RangeIterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Element;
    using difference_type = std::ptrdiff_t;
    using pointer = const Element*;
    using reference = const Element&;
    RangeIterator() = default;
    explicit RangeIterator(std::shared_ptr<Iterator> it);
    const Element& operator*() const { return *current_; }
    const Element* operator->() const { return &*current_; }
    RangeIterator& operator++();
    bool operator==(const RangeIterator& other) const { return done() == other.done(); }

   private:
    bool done() const { return !current_.has_value(); }
    std::shared_ptr<Iterator> it_;
    std::optional<Element> current_;
  };
  RangeIterator begin() const;
  RangeIterator end() const { return {}; }

  const std::shared_ptr<const DatasetImpl>& impl() const { return impl_; }
  bool defined() const { return impl_ != nullptr; }

 private:
  const DatasetImpl& checked(const char* op) const;
  std::shared_ptr<const DatasetImpl> impl_;
};

}  // namespace lockstep::data
