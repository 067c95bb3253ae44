// The data layer's internal interface: what a dataset node implements.
//
// Every source and transformation is a DatasetImpl (immutable, shared by all
// its iterators) that makes IteratorImpls. An iterator saves itself into one
// node of the state tree (StateWriter) and its input into a child node, so a
// state mirrors the pipeline; restore() checks the node names as it descends.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

// Splits one CSV line into fields; quotes follow RFC 4180 within a line.
// Returns false on an unterminated quote (readers.cc).
bool split_csv_fields(const std::string& line, char delim, std::vector<std::string>& fields);

class StateWriter {
 public:
  StateWriter(IteratorState& state, nlohmann::json& node, std::string prefix)
      : state_(&state), node_(&node), prefix_(std::move(prefix)) {}
  nlohmann::json& json() { return *node_; }
  StateWriter child(const std::string& name);
  void put_tensor(const std::string& name, const Tensor& t);
  // Elements of equal structure are stacked into one tensor per component.
  void put_elements(const std::string& name, const std::vector<Element>& elements);
  void put_element(const std::string& name, const Element& element);

 private:
  IteratorState* state_;
  nlohmann::json* node_;
  std::string prefix_;
};

class StateReader {
 public:
  StateReader(const IteratorState& state, const nlohmann::json& node, std::string prefix)
      : state_(&state), node_(&node), prefix_(std::move(prefix)) {}
  const nlohmann::json& json() const { return *node_; }
  // The value at `key`; ValueError naming the node path when missing.
  const nlohmann::json& at(const std::string& key) const;
  StateReader child(const std::string& name) const;
  const Tensor& tensor(const std::string& name) const;
  std::vector<Element> elements(const std::string& name) const;
  Element element(const std::string& name) const;
  const std::string& path() const { return prefix_; }

 private:
  const IteratorState* state_;
  const nlohmann::json* node_;
  std::string prefix_;
};

class IteratorImpl {
 public:
  explicit IteratorImpl(const char* op) : op_(op) {}
  virtual ~IteratorImpl() = default;
  IteratorImpl(const IteratorImpl&) = delete;
  IteratorImpl& operator=(const IteratorImpl&) = delete;

  virtual std::optional<Element> next() = 0;
  // The iterators of a node whose index_source() is set give their next
  // element's index in that source instead of the element, advancing
  // exactly as next() would (others never have it called).
  virtual std::optional<std::int64_t> next_index() { return std::nullopt; }
  // Writes {"op": op_} then the iterator's own fields.
  void save(StateWriter& w);
  // Checks the op name, then reads the fields.
  void restore(const StateReader& r);
  const char* op() const { return op_; }

 protected:
  virtual void save_fields(StateWriter& w) = 0;
  virtual void restore_fields(const StateReader& r) = 0;

 private:
  const char* op_;
};

class DatasetImpl {
 public:
  virtual ~DatasetImpl() = default;
  virtual std::int64_t cardinality() const = 0;
  // `key` identifies this iteration (see "Determinism" in dataset.h).
  virtual std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const = 0;
  // Options attached by with_options (null: none here).
  virtual const Options* attached_options() const { return nullptr; }
  // Sources that read any of their elements directly, in any order
  // (from_tensor_slices, range), say so and return element i of
  // [0, cardinality()). shuffle then shuffles indices and reads each element
  // when it is drawn, instead of holding buffer_size elements.
  virtual bool has_random_access() const { return false; }
  virtual Element element_at(std::int64_t index) const;
  // The random-access source whose elements this node's iterators yield
  // unchanged, in an order of their own (next_index): the source itself, a
  // shuffle straight over it, a repeat of either. batch then gathers the
  // rows straight into the batch (gather) without an Element per row.
  virtual const DatasetImpl* index_source() const { return nullptr; }
  // Elements `indices` stacked along a new first dimension, as batch stacks
  // them (`op` names the caller in errors). The default stacks element_at's;
  // from_tensor_slices copies each row once into the batch.
  virtual Element gather(const std::vector<std::int64_t>& indices, const char* op) const;
  // This node over its input(s) with the file list sharded (FILE
  // auto-sharding); null when that is not possible through this node.
  virtual std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t /*num_shards*/,
                                                                std::int64_t /*index*/) const {
    return nullptr;
  }
};

// A well-mixed combination of two 64-bit values (splitmix64 finaliser).
std::uint64_t mix_key(std::uint64_t a, std::uint64_t b);
// A seed from the OS, for unseeded random transformations.
std::uint64_t fresh_seed();
// Uniform integer in [0, n) from the counter-based stream (seed, key, counter).
std::uint64_t uniform_index(std::uint64_t seed, std::uint64_t key, std::uint64_t counter,
                            std::uint64_t n);

// Stacks elements of equal structure along a new dimension 0 (a copy);
// ShapeError naming the op and the element that differs.
Element stack_elements(const char* op, const std::vector<Element>& elements);

// Checked savers for child iterators.
inline void save_child(StateWriter& w, const char* name, IteratorImpl& it) {
  StateWriter c = w.child(name);
  it.save(c);
}
inline void restore_child(const StateReader& r, const char* name, IteratorImpl& it) {
  it.restore(r.child(name));
}

// Makers for nodes that live in other files.
std::shared_ptr<const DatasetImpl> make_prefetch(std::shared_ptr<const DatasetImpl> input,
                                                 std::int64_t buffer_size);
std::shared_ptr<const DatasetImpl> make_parallel_map(std::shared_ptr<const DatasetImpl> input,
                                                     MapFunction fn, MapOptions options);
std::shared_ptr<const DatasetImpl> make_interleave(std::shared_ptr<const DatasetImpl> input,
                                                   std::function<Dataset(const Element&)> fn,
                                                   InterleaveOptions options);
std::shared_ptr<const DatasetImpl> make_cache(std::shared_ptr<const DatasetImpl> input,
                                              std::string filename);

}  // namespace lockstep::data
