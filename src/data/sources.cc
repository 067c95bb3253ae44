// Sources: tensor slices, tensors, range, generators, zip, concatenate, files.
#include <glob.h>

#include <algorithm>
#include <cstring>

#include "internal.h"

namespace lockstep::data {
namespace {

// ---- from_tensor_slices ----

class SlicesDataset final : public DatasetImpl {
 public:
  SlicesDataset(std::vector<Tensor> components, std::vector<std::string> names)
      : components_(std::move(components)), names_(std::move(names)) {}
  std::int64_t cardinality() const override { return components_[0].dim(0); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t) const override;
  bool has_random_access() const override { return true; }
  Element element_at(std::int64_t i) const override { return at(i); }
  const DatasetImpl* index_source() const override { return this; }

  Element at(std::int64_t i) const {
    std::vector<Tensor> parts;
    parts.reserve(components_.size());
    for (const Tensor& t : components_) {
      std::vector<std::int64_t> dims(t.shape().dims().begin() + 1, t.shape().dims().end());
      parts.push_back(t.view_rows(i, i + 1).view_as(Shape(dims)));
    }
    return Element(std::move(parts), names_);
  }

  // Each component's rows copied once into the batch: what stacking
  // element_at's would give, without a view and an Element per row.
  Element gather(const std::vector<std::int64_t>& indices, const char* op) const override {
    LOCKSTEP_CHECK(!indices.empty(), op, ": nothing to stack");
    const auto n = static_cast<std::int64_t>(indices.size());
    std::vector<Tensor> out;
    out.reserve(components_.size());
    for (const Tensor& t : components_) {
      std::vector<std::int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
      dims[0] = n;
      Tensor stacked = Tensor::empty(Shape(dims), t.dtype());
      const std::size_t row = t.dim(0) == 0 ? 0 : t.nbytes() / static_cast<std::size_t>(t.dim(0));
      const auto* src = static_cast<const char*>(t.raw_data());
      auto* dst = static_cast<char*>(stacked.raw_data());
      for (std::int64_t r = 0; r < n; ++r)
        if (row) std::memcpy(dst + r * row, src + indices[r] * row, row);
      out.push_back(std::move(stacked));
    }
    return Element(std::move(out), names_);
  }

 private:
  std::vector<Tensor> components_;
  std::vector<std::string> names_;
};

class SlicesIterator final : public IteratorImpl {
 public:
  explicit SlicesIterator(const SlicesDataset& ds) : IteratorImpl("from_tensor_slices"), ds_(ds) {}
  std::optional<Element> next() override {
    if (index_ >= ds_.cardinality()) return std::nullopt;
    return ds_.at(index_++);
  }
  std::optional<std::int64_t> next_index() override {
    if (index_ >= ds_.cardinality()) return std::nullopt;
    return index_++;
  }

 protected:
  void save_fields(StateWriter& w) override { w.json()["index"] = index_; }
  void restore_fields(const StateReader& r) override {
    index_ = r.at("index").get<std::int64_t>();
    LOCKSTEP_CHECK(index_ >= 0 && index_ <= ds_.cardinality(), "Iterator::restore: index ", index_,
                   " is outside the ", ds_.cardinality(), " slices");
  }

 private:
  const SlicesDataset& ds_;
  std::int64_t index_ = 0;
};

std::unique_ptr<IteratorImpl> SlicesDataset::make_iterator(std::uint64_t) const {
  return std::make_unique<SlicesIterator>(*this);
}

// ---- from_tensors ----

class TensorsDataset final : public DatasetImpl {
 public:
  explicit TensorsDataset(Element e) : element_(std::move(e)) {}
  std::int64_t cardinality() const override { return 1; }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t) const override;
  const Element& element() const { return element_; }

 private:
  Element element_;
};

class TensorsIterator final : public IteratorImpl {
 public:
  explicit TensorsIterator(const TensorsDataset& ds) : IteratorImpl("from_tensors"), ds_(ds) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    done_ = true;
    return ds_.element();
  }

 protected:
  void save_fields(StateWriter& w) override { w.json()["done"] = done_; }
  void restore_fields(const StateReader& r) override { done_ = r.at("done").get<bool>(); }

 private:
  const TensorsDataset& ds_;
  bool done_ = false;
};

std::unique_ptr<IteratorImpl> TensorsDataset::make_iterator(std::uint64_t) const {
  return std::make_unique<TensorsIterator>(*this);
}

// ---- range ----

class RangeDataset final : public DatasetImpl {
 public:
  RangeDataset(std::int64_t start, std::int64_t stop, std::int64_t step)
      : start_(start), stop_(stop), step_(step) {}
  std::int64_t cardinality() const override {
    if (step_ > 0) return stop_ > start_ ? (stop_ - start_ + step_ - 1) / step_ : 0;
    return start_ > stop_ ? (start_ - stop_ - step_ - 1) / -step_ : 0;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t) const override;
  bool has_random_access() const override { return true; }
  Element element_at(std::int64_t i) const override {
    return Element{Tensor::from_vector<std::int64_t>({value(i)}, Shape{})};
  }
  const DatasetImpl* index_source() const override { return this; }
  std::int64_t value(std::int64_t i) const { return start_ + i * step_; }

 private:
  std::int64_t start_, stop_, step_;
};

class RangeIterator final : public IteratorImpl {
 public:
  explicit RangeIterator(const RangeDataset& ds) : IteratorImpl("range"), ds_(ds) {}
  std::optional<Element> next() override {
    if (index_ >= ds_.cardinality()) return std::nullopt;
    return ds_.element_at(index_++);
  }
  std::optional<std::int64_t> next_index() override {
    if (index_ >= ds_.cardinality()) return std::nullopt;
    return index_++;
  }

 protected:
  void save_fields(StateWriter& w) override { w.json()["index"] = index_; }
  void restore_fields(const StateReader& r) override { index_ = r.at("index").get<std::int64_t>(); }

 private:
  const RangeDataset& ds_;
  std::int64_t index_ = 0;
};

std::unique_ptr<IteratorImpl> RangeDataset::make_iterator(std::uint64_t) const {
  return std::make_unique<RangeIterator>(*this);
}

// ---- from_generator ----

class GeneratorDataset final : public DatasetImpl {
 public:
  GeneratorDataset(std::function<Generator()> make, std::int64_t cardinality)
      : make_(std::move(make)), cardinality_(cardinality) {}
  std::int64_t cardinality() const override { return cardinality_; }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t) const override;
  Generator make() const {
    Generator g = make_();
    LOCKSTEP_CHECK(static_cast<bool>(g), "from_generator: the factory returned an empty function");
    return g;
  }

 private:
  std::function<Generator()> make_;
  std::int64_t cardinality_;
};

class GeneratorIterator final : public IteratorImpl {
 public:
  explicit GeneratorIterator(const GeneratorDataset& ds)
      : IteratorImpl("from_generator"), ds_(ds) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (!generator_) generator_ = ds_.make();
    auto e = generator_();
    if (!e) {
      done_ = true;
      return std::nullopt;
    }
    ++produced_;
    return e;
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["produced"] = produced_;
    w.json()["done"] = done_;
  }
  void restore_fields(const StateReader& r) override {
    const auto produced = r.at("produced").get<std::int64_t>();
    done_ = r.at("done").get<bool>();
    // A generator cannot be rewound: make a new one and skip what was produced.
    generator_ = ds_.make();
    produced_ = 0;
    while (produced_ < produced) {
      LOCKSTEP_CHECK(generator_().has_value(), "Iterator::restore: the generator ended after ",
                     produced_, " elements, but the state was saved after ", produced,
                     " (a generator must be deterministic to resume)");
      ++produced_;
    }
  }

 private:
  const GeneratorDataset& ds_;
  Generator generator_;
  std::int64_t produced_ = 0;
  bool done_ = false;
};

std::unique_ptr<IteratorImpl> GeneratorDataset::make_iterator(std::uint64_t) const {
  return std::make_unique<GeneratorIterator>(*this);
}

// ---- zip ----

class ZipDataset final : public DatasetImpl {
 public:
  explicit ZipDataset(std::vector<std::shared_ptr<const DatasetImpl>> inputs)
      : inputs_(std::move(inputs)) {}
  std::int64_t cardinality() const override {
    std::int64_t n = kInfiniteCardinality;
    bool unknown = false;
    for (const auto& in : inputs_) {
      const std::int64_t c = in->cardinality();
      if (c == kUnknownCardinality)
        unknown = true;
      else if (c != kInfiniteCardinality)
        n = n == kInfiniteCardinality ? c : std::min(n, c);
    }
    if (n != kInfiniteCardinality) return n == 0 ? 0 : (unknown ? kUnknownCardinality : n);
    return unknown ? kUnknownCardinality : kInfiniteCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;

 private:
  std::vector<std::shared_ptr<const DatasetImpl>> inputs_;
};

class ZipIterator final : public IteratorImpl {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<IteratorImpl>> inputs)
      : IteratorImpl("zip"), inputs_(std::move(inputs)) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    std::vector<Tensor> parts;
    std::vector<std::string> names;
    bool named = true;
    for (auto& in : inputs_) {
      auto e = in->next();
      if (!e) {
        done_ = true;
        return std::nullopt;
      }
      named = named && e->names().size() == e->size();
      for (std::size_t c = 0; c < e->size(); ++c) {
        parts.push_back((*e)[c]);
        names.push_back(c < e->names().size() ? e->names()[c] : std::string());
      }
    }
    // Names survive when every input is named and they stay distinct.
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    if (!named || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) names.clear();
    return Element(std::move(parts), std::move(names));
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["done"] = done_;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      StateWriter c = w.child("input" + std::to_string(i));
      inputs_[i]->save(c);
    }
  }
  void restore_fields(const StateReader& r) override {
    done_ = r.at("done").get<bool>();
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      inputs_[i]->restore(r.child("input" + std::to_string(i)));
  }

 private:
  std::vector<std::unique_ptr<IteratorImpl>> inputs_;
  bool done_ = false;
};

std::unique_ptr<IteratorImpl> ZipDataset::make_iterator(std::uint64_t key) const {
  std::vector<std::unique_ptr<IteratorImpl>> its;
  for (std::size_t i = 0; i < inputs_.size(); ++i)
    its.push_back(inputs_[i]->make_iterator(mix_key(key, 0x21b + i)));
  return std::make_unique<ZipIterator>(std::move(its));
}

// ---- concatenate ----

class ConcatenateDataset final : public DatasetImpl {
 public:
  ConcatenateDataset(std::shared_ptr<const DatasetImpl> a, std::shared_ptr<const DatasetImpl> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  std::int64_t cardinality() const override {
    const std::int64_t x = a_->cardinality(), y = b_->cardinality();
    if (x == kInfiniteCardinality || y == kInfiniteCardinality) return kInfiniteCardinality;
    if (x == kUnknownCardinality || y == kUnknownCardinality) return kUnknownCardinality;
    return x + y;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;

 private:
  std::shared_ptr<const DatasetImpl> a_, b_;
};

class ConcatenateIterator final : public IteratorImpl {
 public:
  ConcatenateIterator(std::unique_ptr<IteratorImpl> a, std::unique_ptr<IteratorImpl> b)
      : IteratorImpl("concatenate"), a_(std::move(a)), b_(std::move(b)) {}
  std::optional<Element> next() override {
    if (!first_done_) {
      if (auto e = a_->next()) return e;
      first_done_ = true;
    }
    return b_->next();
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["first_done"] = first_done_;
    save_child(w, "first", *a_);
    save_child(w, "second", *b_);
  }
  void restore_fields(const StateReader& r) override {
    first_done_ = r.at("first_done").get<bool>();
    restore_child(r, "first", *a_);
    restore_child(r, "second", *b_);
  }

 private:
  std::unique_ptr<IteratorImpl> a_, b_;
  bool first_done_ = false;
};

std::unique_ptr<IteratorImpl> ConcatenateDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<ConcatenateIterator>(a_->make_iterator(mix_key(key, 1)),
                                               b_->make_iterator(mix_key(key, 2)));
}

}  // namespace

Dataset Dataset::from_tensor_slices(std::vector<Tensor> components,
                                    std::vector<std::string> names) {
  LOCKSTEP_CHECK(!components.empty(), "from_tensor_slices: no tensors");
  LOCKSTEP_CHECK(names.empty() || names.size() == components.size(),
                 "from_tensor_slices: ", names.size(), " names for ", components.size(),
                 " tensors");
  for (std::size_t i = 0; i < components.size(); ++i) {
    const Tensor& t = components[i];
    LOCKSTEP_CHECK(t.defined(), "from_tensor_slices: tensor ", i, " is undefined");
    LOCKSTEP_CHECK_AS(ShapeError, t.rank() >= 1, "from_tensor_slices: tensor ", i,
                      " is a scalar; slicing needs at least one dimension");
    LOCKSTEP_CHECK_AS(ShapeError, t.dim(0) == components[0].dim(0),
                      "from_tensor_slices: all tensors must have the same size in dimension 0, "
                      "got ",
                      components[0].shape(), " (tensor 0) and ", t.shape(), " (tensor ", i, ")");
  }
  Element check(components, names);  // validates the names
  return Dataset(std::make_shared<SlicesDataset>(std::move(components), std::move(names)));
}

Dataset Dataset::from_tensor_slices(const Tensor& tensor) {
  return from_tensor_slices(std::vector<Tensor>{tensor});
}

Dataset Dataset::from_tensors(Element element) {
  LOCKSTEP_CHECK(!element.empty(), "from_tensors: the element has no tensors");
  return Dataset(std::make_shared<TensorsDataset>(std::move(element)));
}

Dataset Dataset::from_tensors(std::initializer_list<int> values) {
  return from_tensors(Element{Tensor::from_vector(std::vector<std::int32_t>(values))});
}

Dataset Dataset::from_tensors(std::initializer_list<float> values) {
  return from_tensors(Element{Tensor::from_vector(std::vector<float>(values))});
}

Dataset Dataset::range(std::int64_t stop) { return range(0, stop, 1); }

Dataset Dataset::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  LOCKSTEP_CHECK(step != 0, "Dataset::range: step must not be 0");
  return Dataset(std::make_shared<RangeDataset>(start, stop, step));
}

Dataset Dataset::from_generator(std::function<Generator()> make, std::int64_t cardinality) {
  LOCKSTEP_CHECK(static_cast<bool>(make), "from_generator: the generator factory is empty");
  LOCKSTEP_CHECK(cardinality >= kUnknownCardinality, "from_generator: invalid cardinality ",
                 cardinality);
  return Dataset(std::make_shared<GeneratorDataset>(std::move(make), cardinality));
}

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  LOCKSTEP_CHECK(!datasets.empty(), "Dataset::zip: no datasets");
  std::vector<std::shared_ptr<const DatasetImpl>> impls;
  for (const auto& d : datasets) {
    LOCKSTEP_CHECK(d.defined(), "Dataset::zip: dataset ", impls.size(), " is undefined");
    impls.push_back(d.impl());
  }
  return Dataset(std::make_shared<ZipDataset>(std::move(impls)));
}

Dataset Dataset::concatenate(const Dataset& other) const {
  checked("concatenate");
  LOCKSTEP_CHECK(other.defined(), "Dataset::concatenate: the other dataset is undefined");
  return Dataset(std::make_shared<ConcatenateDataset>(impl_, other.impl()));
}

namespace {

// A file list: passes its generator through, and is where FILE auto-sharding
// splits the input across workers (shard(n, i) of the list).
class FileListDataset final : public DatasetImpl {
 public:
  FileListDataset(std::shared_ptr<const DatasetImpl> files, std::int64_t count)
      : files_(std::move(files)), count_(count) {}
  std::int64_t cardinality() const override { return files_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override {
    return files_->make_iterator(key);
  }
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    if (count_ < n) return nullptr;  // a worker would have no file
    return Dataset(files_).shard(n, i).impl();
  }

 private:
  std::shared_ptr<const DatasetImpl> files_;
  std::int64_t count_;
};

// Options attached to a pipeline; its elements pass straight through.
class OptionsDataset final : public DatasetImpl {
 public:
  OptionsDataset(std::shared_ptr<const DatasetImpl> input, Options options)
      : input_(std::move(input)), options_(options) {}
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override {
    return input_->make_iterator(key);
  }
  const Options* attached_options() const override { return &options_; }
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    auto sharded = input_->with_sharded_files(n, i);
    return sharded ? std::make_shared<OptionsDataset>(std::move(sharded), options_) : nullptr;
  }

 private:
  std::shared_ptr<const DatasetImpl> input_;
  Options options_;
};

}  // namespace

Dataset Dataset::from_files(std::vector<std::string> paths) {
  // One byte tensor per path, served by a generator over a shared copy.
  auto shared = std::make_shared<const std::vector<std::string>>(std::move(paths));
  const auto n = static_cast<std::int64_t>(shared->size());
  const Dataset files = from_generator(
      [shared] {
        return Generator([shared, i = std::size_t{0}]() mutable -> std::optional<Element> {
          if (i >= shared->size()) return std::nullopt;
          return Element{Element::string_tensor((*shared)[i++])};
        });
      },
      n);
  return Dataset(std::make_shared<FileListDataset>(files.impl(), n));
}

Dataset Dataset::with_options(Options options) const {
  checked("with_options");
  return Dataset(std::make_shared<OptionsDataset>(impl_, options));
}

Options Dataset::options() const {
  const Options* o = checked("options").attached_options();
  return o ? *o : Options{};
}

Dataset Dataset::with_sharded_files(std::int64_t num_shards, std::int64_t index) const {
  LOCKSTEP_CHECK(num_shards >= 1 && index >= 0 && index < num_shards,
                 "Dataset::with_sharded_files: shard ", index, " of ", num_shards);
  return Dataset(checked("with_sharded_files").with_sharded_files(num_shards, index));
}

Dataset Dataset::list_files(const std::string& pattern, bool shuffle,
                            std::optional<std::uint64_t> seed) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  LOCKSTEP_CHECK_AS(IOError, rc == 0 || rc == GLOB_NOMATCH,
                    "Dataset::list_files: cannot read the directories of '", pattern, "'");
  LOCKSTEP_CHECK_AS(IOError, !paths.empty(), "Dataset::list_files: no files match '", pattern, "'");
  std::sort(paths.begin(), paths.end());
  Dataset ds = from_files(std::move(paths));
  if (shuffle) {
    const auto n = ds.cardinality();
    ds = ds.shuffle(n, {.seed = seed});
  }
  return ds;
}

}  // namespace lockstep::data
