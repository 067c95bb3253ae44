// Transformations that run on the consumer's thread: map, filter, batch,
// padded_batch, unbatch, shuffle, repeat, take, skip, shard, enumerate.
#include <algorithm>
#include <cstring>

#include "internal.h"

namespace lockstep::data {
namespace {

using Input = std::shared_ptr<const DatasetImpl>;

// A transformation with one input whose iterator keeps the input's key.
class UnaryDataset : public DatasetImpl {
 public:
  explicit UnaryDataset(Input input) : input_(std::move(input)) {}
  const DatasetImpl& input() const { return *input_; }
  // The same transformation over the input with its file list sharded.
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    Input sharded = input_->with_sharded_files(n, i);
    return sharded ? with_input(std::move(sharded)) : nullptr;
  }

 protected:
  virtual Input with_input(Input input) const = 0;
  Input input_;
};

// UnaryDataset's copy over another input, for every transformation `Self`.
template <typename Self>
class UnaryBase : public UnaryDataset {
 public:
  using UnaryDataset::UnaryDataset;

 protected:
  Input with_input(Input input) const override {
    auto copy = std::make_shared<Self>(static_cast<const Self&>(*this));
    copy->input_ = std::move(input);
    return copy;
  }
};

// An iterator whose state is its input's plus a few fields.
class UnaryIterator : public IteratorImpl {
 public:
  UnaryIterator(const char* op, std::unique_ptr<IteratorImpl> input)
      : IteratorImpl(op), input_(std::move(input)) {}

 protected:
  void save_fields(StateWriter& w) override {
    save_own(w);
    save_child(w, "input", *input_);
  }
  void restore_fields(const StateReader& r) override {
    restore_own(r);
    restore_child(r, "input", *input_);
  }
  virtual void save_own(StateWriter&) {}
  virtual void restore_own(const StateReader&) {}

  std::unique_ptr<IteratorImpl> input_;
};

// ---- map (sequential) ----

class MapDataset final : public UnaryBase<MapDataset> {
 public:
  MapDataset(Input input, MapFunction fn) : UnaryBase(std::move(input)), fn_(std::move(fn)) {}
  std::int64_t cardinality() const override { return input().cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  const MapFunction& fn() const { return fn_; }

 private:
  MapFunction fn_;
};

class MapIterator final : public UnaryIterator {
 public:
  MapIterator(const MapDataset& ds, std::unique_ptr<IteratorImpl> in)
      : UnaryIterator("map", std::move(in)), ds_(ds) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    return ds_.fn()(*e);
  }

 private:
  const MapDataset& ds_;
};

std::unique_ptr<IteratorImpl> MapDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<MapIterator>(*this, input_->make_iterator(key));
}

// ---- filter ----

class FilterDataset final : public UnaryBase<FilterDataset> {
 public:
  FilterDataset(Input input, Predicate p) : UnaryBase(std::move(input)), p_(std::move(p)) {}
  std::int64_t cardinality() const override {
    return input().cardinality() == kInfiniteCardinality ? kInfiniteCardinality
                                                         : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  const Predicate& predicate() const { return p_; }

 private:
  Predicate p_;
};

class FilterIterator final : public UnaryIterator {
 public:
  FilterIterator(const FilterDataset& ds, std::unique_ptr<IteratorImpl> in)
      : UnaryIterator("filter", std::move(in)), ds_(ds) {}
  std::optional<Element> next() override {
    while (auto e = input_->next()) {
      if (ds_.predicate()(*e)) return e;
    }
    return std::nullopt;
  }

 private:
  const FilterDataset& ds_;
};

std::unique_ptr<IteratorImpl> FilterDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<FilterIterator>(*this, input_->make_iterator(key));
}

// ---- batch / padded_batch ----

// Copies `src` into the leading corner of `dst` (same rank, dst at least as
// large in every dimension); the rest of dst keeps its padding.
void copy_into_corner(const Tensor& src, char* dst, const Shape& dst_shape) {
  const std::size_t item = dtype_size(src.dtype());
  const int rank = src.rank();
  if (src.numel() == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src.raw_data(), item);
    return;
  }
  // Rows of the last dimension, walked with an index counter.
  const std::size_t row_bytes = static_cast<std::size_t>(src.dim(rank - 1)) * item;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rank - 1), 0);
  const char* s = static_cast<const char*>(src.raw_data());
  const std::int64_t rows = src.numel() / src.dim(rank - 1);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t offset = 0;
    for (int d = 0; d < rank - 1; ++d)
      offset = offset * dst_shape[d] + idx[static_cast<std::size_t>(d)];
    std::memcpy(dst + static_cast<std::size_t>(offset * dst_shape[rank - 1]) * item, s, row_bytes);
    s += row_bytes;
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < src.dim(d)) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

Element pad_and_stack(const std::vector<Element>& elements, double padding_value) {
  const Element& first = elements[0];
  std::vector<Tensor> out;
  for (std::size_t c = 0; c < first.size(); ++c) {
    std::vector<std::int64_t> max_dims(first[c].shape().dims().begin(),
                                       first[c].shape().dims().end());
    for (std::size_t i = 0; i < elements.size(); ++i) {
      const Element& e = elements[i];
      LOCKSTEP_CHECK_AS(ShapeError, e.size() == first.size(), "padded_batch: element ", i, " has ",
                        e.size(), " components but element 0 has ", first.size());
      const Tensor& t = e[c];
      LOCKSTEP_CHECK_AS(ShapeError, t.rank() == first[c].rank() && t.dtype() == first[c].dtype(),
                        "padded_batch: element ", i, " has component ", c, " of ", t.dtype(), " ",
                        t.shape(), " but element 0 has ", first[c].dtype(), " ", first[c].shape(),
                        " (padding needs the same rank and dtype)");
      for (int d = 0; d < t.rank(); ++d)
        max_dims[static_cast<std::size_t>(d)] =
            std::max(max_dims[static_cast<std::size_t>(d)], t.dim(d));
    }
    std::vector<std::int64_t> dims{static_cast<std::int64_t>(elements.size())};
    dims.insert(dims.end(), max_dims.begin(), max_dims.end());
    Tensor batch = Tensor::full(Shape(dims), padding_value, first[c].dtype());
    const Shape row_shape(max_dims);
    const std::size_t row_bytes =
        static_cast<std::size_t>(row_shape.numel()) * dtype_size(batch.dtype());
    auto* dst = static_cast<char*>(batch.raw_data());
    for (std::size_t i = 0; i < elements.size(); ++i)
      copy_into_corner(elements[i][c], dst + i * row_bytes, row_shape);
    out.push_back(std::move(batch));
  }
  return Element(std::move(out), first.names());
}

class BatchDataset final : public UnaryBase<BatchDataset> {
 public:
  BatchDataset(Input input, std::int64_t size, bool drop_remainder, bool padded, double padding)
      : UnaryBase(std::move(input)),
        size_(size),
        drop_remainder_(drop_remainder),
        padded_(padded),
        padding_(padding) {}
  std::int64_t cardinality() const override {
    const std::int64_t n = input().cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / size_ : (n + size_ - 1) / size_;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  std::int64_t size() const { return size_; }
  bool drop_remainder() const { return drop_remainder_; }
  bool padded() const { return padded_; }
  double padding() const { return padding_; }

 private:
  std::int64_t size_;
  bool drop_remainder_, padded_;
  double padding_;
};

class BatchIterator final : public UnaryIterator {
 public:
  BatchIterator(const BatchDataset& ds, std::unique_ptr<IteratorImpl> in)
      : UnaryIterator(ds.padded() ? "padded_batch" : "batch", std::move(in)), ds_(ds) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (!ds_.padded())
      if (const DatasetImpl* source = ds_.input().index_source()) return gather_from(*source);
    std::vector<Element> items;
    // Not the batch size itself: a batch larger than the data (batch(2^31))
    // holds what there is, as Keras's.
    items.reserve(static_cast<std::size_t>(std::min<std::int64_t>(ds_.size(), 4096)));
    while (static_cast<std::int64_t>(items.size()) < ds_.size()) {
      auto e = input_->next();
      if (!e) {
        done_ = true;
        break;
      }
      items.push_back(std::move(*e));
    }
    if (items.empty()) return std::nullopt;
    if (static_cast<std::int64_t>(items.size()) < ds_.size() && ds_.drop_remainder())
      return std::nullopt;
    return ds_.padded() ? pad_and_stack(items, ds_.padding()) : stack_elements(op(), items);
  }

 protected:
  void save_own(StateWriter& w) override { w.json()["done"] = done_; }
  void restore_own(const StateReader& r) override { done_ = r.at("done").get<bool>(); }

 private:
  // The same batch as next()'s loop, from the input's indices: the rows
  // are copied once, from the source into the batch.
  std::optional<Element> gather_from(const DatasetImpl& source) {
    std::vector<std::int64_t> indices;
    indices.reserve(static_cast<std::size_t>(std::min<std::int64_t>(ds_.size(), 4096)));
    while (static_cast<std::int64_t>(indices.size()) < ds_.size()) {
      const std::optional<std::int64_t> i = input_->next_index();
      if (!i) {
        done_ = true;
        break;
      }
      indices.push_back(*i);
    }
    if (indices.empty()) return std::nullopt;
    if (static_cast<std::int64_t>(indices.size()) < ds_.size() && ds_.drop_remainder())
      return std::nullopt;
    return source.gather(indices, op());
  }

  const BatchDataset& ds_;
  bool done_ = false;
};

std::unique_ptr<IteratorImpl> BatchDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<BatchIterator>(*this, input_->make_iterator(key));
}

// ---- unbatch ----

class UnbatchDataset final : public UnaryBase<UnbatchDataset> {
 public:
  using UnaryBase::UnaryBase;
  std::int64_t cardinality() const override {
    return input().cardinality() == kInfiniteCardinality ? kInfiniteCardinality
                                                         : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
};

class UnbatchIterator final : public UnaryIterator {
 public:
  explicit UnbatchIterator(std::unique_ptr<IteratorImpl> in)
      : UnaryIterator("unbatch", std::move(in)) {}
  std::optional<Element> next() override {
    while (!current_ || row_ >= rows_) {
      current_ = input_->next();
      if (!current_) return std::nullopt;
      row_ = 0;
      rows_ = -1;
      for (std::size_t c = 0; c < current_->size(); ++c) {
        const Tensor& t = (*current_)[c];
        LOCKSTEP_CHECK_AS(ShapeError, t.rank() >= 1, "unbatch: component ", c,
                          " is a scalar; every component needs a batch dimension");
        if (rows_ < 0) rows_ = t.dim(0);
        LOCKSTEP_CHECK_AS(ShapeError, t.dim(0) == rows_,
                          "unbatch: components have different "
                          "batch sizes (",
                          rows_, " and ", t.dim(0), " in component ", c, ")");
      }
    }
    std::vector<Tensor> parts;
    for (const Tensor& t : current_->components()) {
      std::vector<std::int64_t> dims(t.shape().dims().begin() + 1, t.shape().dims().end());
      parts.push_back(t.view_rows(row_, row_ + 1).view_as(Shape(dims)));
    }
    ++row_;
    return Element(std::move(parts), current_->names());
  }

 protected:
  void save_own(StateWriter& w) override {
    w.json()["row"] = row_;
    w.json()["rows"] = rows_;
    w.json()["has_current"] = current_.has_value();
    if (current_) w.put_element("current", *current_);
  }
  void restore_own(const StateReader& r) override {
    row_ = r.at("row").get<std::int64_t>();
    rows_ = r.at("rows").get<std::int64_t>();
    current_.reset();
    if (r.at("has_current").get<bool>()) current_ = r.element("current");
  }

 private:
  std::optional<Element> current_;
  std::int64_t row_ = 0, rows_ = 0;
};

std::unique_ptr<IteratorImpl> UnbatchDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<UnbatchIterator>(input_->make_iterator(key));
}

// ---- shuffle ----

class ShuffleDataset final : public UnaryBase<ShuffleDataset> {
 public:
  ShuffleDataset(Input input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle)
      : UnaryBase(std::move(input)),
        buffer_size_(buffer_size),
        seed_(seed),
        reshuffle_(reshuffle) {}
  std::int64_t cardinality() const override { return input().cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  // Straight over a source with random access, it shuffles indices
  // (IndexShuffleIterator).
  const DatasetImpl* index_source() const override {
    return input().has_random_access() ? &input() : nullptr;
  }
  std::int64_t buffer_size() const { return buffer_size_; }
  std::uint64_t seed() const { return seed_; }
  bool reshuffle() const { return reshuffle_; }

 private:
  std::int64_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
};

// tf.data's algorithm: keep the buffer full, emit a uniformly chosen buffer
// slot and refill it from the input. Draw k of an iteration is a pure
// function of (seed, iteration key, k). T is what the buffer holds: the
// elements (ShuffleIterator), or the indices of a source with random access
// (IndexShuffleIterator).
template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(const ShuffleDataset& ds, std::uint64_t key)
      : size_(ds.buffer_size()), seed_(ds.seed()), key_(ds.reshuffle() ? key : 0) {}

  // The next draw; `read()` gives the input's next value, or nullopt at its end.
  template <typename Read>
  std::optional<T> draw(Read&& read) {
    if (!filled_) {
      filled_ = true;
      buffer_.reserve(static_cast<std::size_t>(std::min<std::int64_t>(size_, 1 << 20)));
      while (static_cast<std::int64_t>(buffer_.size()) < size_) {
        std::optional<T> v = read();
        if (!v) {
          input_done_ = true;
          break;
        }
        buffer_.push_back(std::move(*v));
      }
    }
    if (buffer_.empty()) return std::nullopt;
    const std::size_t i = uniform_index(seed_, key_, draws_++, buffer_.size());
    T out = std::move(buffer_[i]);
    std::optional<T> v = input_done_ ? std::nullopt : read();
    if (v) {
      buffer_[i] = std::move(*v);
    } else {
      input_done_ = true;
      buffer_[i] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return out;
  }

  // The fields besides the buffered values, which each iterator saves its way.
  void save(StateWriter& w) const {
    w.json()["seed"] = seed_;
    w.json()["key"] = key_;
    w.json()["draws"] = draws_;
    w.json()["filled"] = filled_;
    w.json()["input_done"] = input_done_;
  }
  void restore(const StateReader& r, std::vector<T> values) {
    seed_ = r.at("seed").get<std::uint64_t>();
    key_ = r.at("key").get<std::uint64_t>();
    draws_ = r.at("draws").get<std::uint64_t>();
    filled_ = r.at("filled").get<bool>();
    input_done_ = r.at("input_done").get<bool>();
    buffer_ = std::move(values);
  }
  const std::vector<T>& values() const { return buffer_; }

 private:
  std::int64_t size_;
  std::uint64_t seed_, key_;
  std::uint64_t draws_ = 0;
  bool filled_ = false, input_done_ = false;
  std::vector<T> buffer_;
};

class ShuffleIterator final : public UnaryIterator {
 public:
  ShuffleIterator(const ShuffleDataset& ds, std::unique_ptr<IteratorImpl> in, std::uint64_t key)
      : UnaryIterator("shuffle", std::move(in)), buffer_(ds, key) {}
  std::optional<Element> next() override {
    return buffer_.draw([this] { return input_->next(); });
  }

 protected:
  void save_own(StateWriter& w) override {
    buffer_.save(w);
    w.put_elements("buffer", buffer_.values());
  }
  void restore_own(const StateReader& r) override { buffer_.restore(r, r.elements("buffer")); }

 private:
  ShuffleBuffer<Element> buffer_;
};

// The same algorithm and the same draws over a source with random access
// (from_tensor_slices, range), on the elements' indices: the same order,
// with the buffer holding indices and each element read when it is drawn.
// Shuffling Fashion-MNIST's 60,000 float32 rows this way adds 45-120 ns an
// element instead of 420-740 (a buffer of elements scattered over the heap
// misses the caches on every draw), and the iterator state halfway through
// an epoch is 0.23 MiB of indices instead of 90 of rows (data_bench,
// BM_FashionMnist_ShuffleCost).
class IndexShuffleIterator final : public IteratorImpl {
 public:
  IndexShuffleIterator(const ShuffleDataset& ds, std::uint64_t key)
      : IteratorImpl("shuffle"),
        input_(ds.input()),
        count_(input_.cardinality()),
        buffer_(ds, key) {}
  std::optional<Element> next() override {
    const std::optional<std::int64_t> i = next_index();
    if (!i) return std::nullopt;
    return input_.element_at(*i);
  }
  std::optional<std::int64_t> next_index() override {
    return buffer_.draw([this]() -> std::optional<std::int64_t> {
      if (next_ == count_) return std::nullopt;
      return next_++;
    });
  }

 protected:
  void save_fields(StateWriter& w) override {
    buffer_.save(w);
    w.json()["next_index"] = next_;
    w.put_tensor("indices", Tensor::from_vector(buffer_.values()));
  }
  void restore_fields(const StateReader& r) override {
    const std::int64_t next = r.at("next_index").get<std::int64_t>();
    LOCKSTEP_CHECK(next >= 0 && next <= count_, "Iterator::restore: shuffle at '", r.path(),
                   "': next index ", next, " is outside the input's ", count_, " elements");
    const Tensor& indices = r.tensor("indices");
    LOCKSTEP_CHECK(indices.dtype() == DType::kInt64 && indices.rank() == 1,
                   "Iterator::restore: shuffle at '", r.path(),
                   "': expected the buffer's indices as int64 of rank 1, got ", indices.dtype(),
                   " ", indices.shape());
    const auto* p = indices.data<std::int64_t>();
    std::vector<std::int64_t> values(p, p + indices.numel());
    for (std::int64_t v : values) {
      LOCKSTEP_CHECK(v >= 0 && v < next, "Iterator::restore: shuffle at '", r.path(),
                     "': buffered index ", v, " is not one read yet (next index ", next, ")");
    }
    buffer_.restore(r, std::move(values));
    next_ = next;
  }

 private:
  const DatasetImpl& input_;
  const std::int64_t count_;
  std::int64_t next_ = 0;  // the next index the input gives
  ShuffleBuffer<std::int64_t> buffer_;
};

std::unique_ptr<IteratorImpl> ShuffleDataset::make_iterator(std::uint64_t key) const {
  if (input_->has_random_access()) return std::make_unique<IndexShuffleIterator>(*this, key);
  return std::make_unique<ShuffleIterator>(*this, input_->make_iterator(key), key);
}

// ---- repeat ----

class RepeatDataset final : public UnaryBase<RepeatDataset> {
 public:
  RepeatDataset(Input input, std::int64_t count) : UnaryBase(std::move(input)), count_(count) {}
  std::int64_t cardinality() const override {
    const std::int64_t n = input().cardinality();
    if (n == 0 || count_ == 0) return 0;
    if (count_ < 0) return n == kUnknownCardinality ? kUnknownCardinality : kInfiniteCardinality;
    return n < 0 ? n : n * count_;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  const DatasetImpl* index_source() const override { return input().index_source(); }
  std::int64_t count() const { return count_; }

 private:
  std::int64_t count_;
};

class RepeatIterator final : public IteratorImpl {
 public:
  RepeatIterator(const RepeatDataset& ds, std::uint64_t key)
      : IteratorImpl("repeat"), ds_(ds), key_(key) {}
  std::optional<Element> next() override {
    return next_of([](IteratorImpl& in) { return in.next(); });
  }
  std::optional<std::int64_t> next_index() override {
    return next_of([](IteratorImpl& in) { return in.next_index(); });
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["key"] = key_;
    w.json()["pass"] = pass_;
    w.json()["produced_in_pass"] = produced_in_pass_;
    w.json()["has_input"] = input_ != nullptr;
    if (input_) save_child(w, "input", *input_);
  }
  void restore_fields(const StateReader& r) override {
    key_ = r.at("key").get<std::uint64_t>();
    pass_ = r.at("pass").get<std::int64_t>();
    produced_in_pass_ = r.at("produced_in_pass").get<std::int64_t>();
    input_.reset();
    if (r.at("has_input").get<bool>()) {
      input_ = ds_.input().make_iterator(mix_key(key_, static_cast<std::uint64_t>(pass_)));
      restore_child(r, "input", *input_);
    }
  }

 private:
  // The next element (or index) of the current pass, starting the next
  // pass when one ends.
  template <class Next>
  auto next_of(Next next) -> decltype(next(std::declval<IteratorImpl&>())) {
    while (ds_.count() < 0 || pass_ < ds_.count()) {
      if (!input_) {
        input_ = ds_.input().make_iterator(mix_key(key_, static_cast<std::uint64_t>(pass_)));
        produced_in_pass_ = 0;
      }
      if (auto e = next(*input_)) {
        ++produced_in_pass_;
        return e;
      }
      input_.reset();
      ++pass_;
      // An empty pass means every pass is empty: stop instead of spinning.
      if (produced_in_pass_ == 0) break;
    }
    return std::nullopt;
  }

  const RepeatDataset& ds_;
  std::uint64_t key_;
  std::int64_t pass_ = 0, produced_in_pass_ = 0;
  std::unique_ptr<IteratorImpl> input_;
};

std::unique_ptr<IteratorImpl> RepeatDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<RepeatIterator>(*this, key);
}

// ---- take / skip / shard / enumerate ----

enum class CountOp { kTake, kSkip, kShard, kEnumerate };

class CountDataset final : public UnaryBase<CountDataset> {
 public:
  CountDataset(Input input, CountOp kind, std::int64_t a, std::int64_t b)
      : UnaryBase(std::move(input)), kind_(kind), a_(a), b_(b) {}
  std::int64_t cardinality() const override {
    const std::int64_t n = input().cardinality();
    switch (kind_) {
      case CountOp::kTake:
        if (a_ < 0) return n;
        if (n == kInfiniteCardinality) return a_;
        return n == kUnknownCardinality ? n : std::min(n, a_);
      case CountOp::kSkip:
        if (n < 0) return n;
        return a_ < 0 ? 0 : std::max<std::int64_t>(0, n - a_);
      case CountOp::kShard:
        if (n < 0) return n;
        return n > b_ ? (n - b_ + a_ - 1) / a_ : 0;
      case CountOp::kEnumerate:
        return n;
    }
    return n;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  CountOp kind() const { return kind_; }
  std::int64_t a() const { return a_; }
  std::int64_t b() const { return b_; }

 private:
  CountOp kind_;
  std::int64_t a_, b_;
};

const char* count_op_name(CountOp k) {
  switch (k) {
    case CountOp::kTake:
      return "take";
    case CountOp::kSkip:
      return "skip";
    case CountOp::kShard:
      return "shard";
    case CountOp::kEnumerate:
      return "enumerate";
  }
  return "?";
}

class CountIterator final : public UnaryIterator {
 public:
  CountIterator(const CountDataset& ds, std::unique_ptr<IteratorImpl> in)
      : UnaryIterator(count_op_name(ds.kind()), std::move(in)), ds_(ds) {}
  std::optional<Element> next() override {
    switch (ds_.kind()) {
      case CountOp::kTake:
        if (ds_.a() >= 0 && count_ >= ds_.a()) return std::nullopt;
        ++count_;
        return input_->next();
      case CountOp::kSkip:
        // skip(-1) skips everything, as tf.data.
        while (ds_.a() < 0 || count_ < ds_.a()) {
          if (!input_->next()) return std::nullopt;
          ++count_;
        }
        return input_->next();
      case CountOp::kShard:
        while (auto e = input_->next()) {
          if (count_++ % ds_.a() == ds_.b()) return e;
        }
        return std::nullopt;
      case CountOp::kEnumerate: {
        auto e = input_->next();
        if (!e) return std::nullopt;
        std::vector<Tensor> parts{Tensor::from_vector<std::int64_t>({ds_.a() + count_++}, Shape{})};
        parts.insert(parts.end(), e->components().begin(), e->components().end());
        std::vector<std::string> names;
        if (!e->names().empty()) {
          names.push_back("index");
          names.insert(names.end(), e->names().begin(), e->names().end());
          if (std::count(names.begin(), names.end(), "index") > 1) names.clear();
        }
        return Element(std::move(parts), std::move(names));
      }
    }
    return std::nullopt;
  }

 protected:
  void save_own(StateWriter& w) override { w.json()["count"] = count_; }
  void restore_own(const StateReader& r) override { count_ = r.at("count").get<std::int64_t>(); }

 private:
  const CountDataset& ds_;
  std::int64_t count_ = 0;
};

std::unique_ptr<IteratorImpl> CountDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<CountIterator>(*this, input_->make_iterator(key));
}

}  // namespace

Dataset Dataset::map(MapFunction fn, MapOptions options) const {
  checked("map");
  LOCKSTEP_CHECK(static_cast<bool>(fn), "Dataset::map: the function is empty");
  LOCKSTEP_CHECK(options.num_parallel_calls == kAutotune || options.num_parallel_calls >= 0,
                 "Dataset::map: num_parallel_calls must be >= 1 or kAutotune, got ",
                 options.num_parallel_calls);
  if (options.num_parallel_calls == kAutotune || options.num_parallel_calls > 1)
    return Dataset(make_parallel_map(impl_, std::move(fn), options));
  return Dataset(std::make_shared<MapDataset>(impl_, std::move(fn)));
}

Dataset Dataset::filter(Predicate predicate) const {
  checked("filter");
  LOCKSTEP_CHECK(static_cast<bool>(predicate), "Dataset::filter: the predicate is empty");
  return Dataset(std::make_shared<FilterDataset>(impl_, std::move(predicate)));
}

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  checked("batch");
  LOCKSTEP_CHECK(batch_size > 0, "Dataset::batch: batch_size must be > 0, got ", batch_size);
  return Dataset(std::make_shared<BatchDataset>(impl_, batch_size, drop_remainder, false, 0.0));
}

Dataset Dataset::padded_batch(std::int64_t batch_size, PaddedBatchOptions options) const {
  checked("padded_batch");
  LOCKSTEP_CHECK(batch_size > 0, "Dataset::padded_batch: batch_size must be > 0, got ", batch_size);
  return Dataset(std::make_shared<BatchDataset>(impl_, batch_size, options.drop_remainder, true,
                                                options.padding_value));
}

Dataset Dataset::unbatch() const {
  checked("unbatch");
  return Dataset(std::make_shared<UnbatchDataset>(impl_));
}

Dataset Dataset::shuffle(std::int64_t buffer_size, ShuffleOptions options) const {
  checked("shuffle");
  LOCKSTEP_CHECK(buffer_size > 0, "Dataset::shuffle: buffer_size must be > 0, got ", buffer_size);
  return Dataset(std::make_shared<ShuffleDataset>(impl_, buffer_size,
                                                  options.seed ? *options.seed : fresh_seed(),
                                                  options.reshuffle_each_iteration));
}

Dataset Dataset::repeat(std::int64_t count) const {
  checked("repeat");
  return Dataset(std::make_shared<RepeatDataset>(impl_, count));
}

Dataset Dataset::take(std::int64_t count) const {
  checked("take");
  return Dataset(std::make_shared<CountDataset>(impl_, CountOp::kTake, count, 0));
}

Dataset Dataset::skip(std::int64_t count) const {
  checked("skip");
  return Dataset(std::make_shared<CountDataset>(impl_, CountOp::kSkip, count, 0));
}

Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  checked("shard");
  LOCKSTEP_CHECK(num_shards >= 1, "Dataset::shard: num_shards must be >= 1, got ", num_shards);
  LOCKSTEP_CHECK_AS(IndexError, index >= 0 && index < num_shards, "Dataset::shard: index ", index,
                    " is out of range for ", num_shards, " shards (expected 0 to ", num_shards - 1,
                    ")");
  return Dataset(std::make_shared<CountDataset>(impl_, CountOp::kShard, num_shards, index));
}

Dataset Dataset::enumerate(std::int64_t start) const {
  checked("enumerate");
  return Dataset(std::make_shared<CountDataset>(impl_, CountOp::kEnumerate, start, 0));
}

Dataset Dataset::cache(const std::string& filename) const {
  checked("cache");
  return Dataset(make_cache(impl_, filename));
}

Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  checked("prefetch");
  LOCKSTEP_CHECK(buffer_size == kAutotune || buffer_size >= 0,
                 "Dataset::prefetch: buffer_size must be >= 0 or kAutotune, got ", buffer_size);
  if (buffer_size == 0) return *this;
  return Dataset(make_prefetch(impl_, buffer_size));
}

Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn,
                            InterleaveOptions options) const {
  checked("interleave");
  LOCKSTEP_CHECK(static_cast<bool>(fn), "Dataset::interleave: the function is empty");
  LOCKSTEP_CHECK(options.cycle_length == kAutotune || options.cycle_length >= 1,
                 "Dataset::interleave: cycle_length must be >= 1 or kAutotune, got ",
                 options.cycle_length);
  LOCKSTEP_CHECK(options.block_length >= 1, "Dataset::interleave: block_length must be >= 1, got ",
                 options.block_length);
  return Dataset(make_interleave(impl_, std::move(fn), options));
}

}  // namespace lockstep::data
