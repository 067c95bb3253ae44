// The feature columns' internals, shared by feature_column.cc and the
// canned estimators: what every column computes from a batch of features,
// and where columns keep their variables.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/estimator/feature_column.h"

namespace lockstep::feature_column {

// Per example, the ids of a categorical column ("no value" entries
// dropped), with the number of examples.
struct IdLists {
  std::int64_t batch = 0;
  std::vector<std::vector<std::int64_t>> ids{};
};

// A layer's variables by name: made on first use through create_variable
// (so a strategy's scope mirrors them) and found afterwards. Thread-safe:
// replicas look variables up while they run.
class ColumnVariables {
 public:
  explicit ColumnVariables(std::string prefix) : prefix_(std::move(prefix)) {}
  // "<prefix>/<name>".
  Variable get(const std::string& name, const Shape& shape, const Initializer& initializer,
               bool trainable);
  std::vector<Variable> all() const;

 private:
  std::string prefix_;
  mutable std::mutex mu_;
  std::map<std::string, Variable> by_name_;
  std::vector<Variable> ordered_;
};

class ColumnImpl {
 public:
  virtual ~ColumnImpl() = default;
  virtual std::string name() const = 0;
  virtual bool is_dense() const { return false; }
  virtual bool is_categorical() const { return false; }
  // Dense columns: values per example, and the batch's as float32
  // [batch, width] (embedding tables come from `variables`).
  virtual std::int64_t width() const { return 0; }
  virtual Tensor dense(const Features& features, ColumnVariables& variables) const;
  // Categorical columns.
  virtual std::int64_t num_buckets() const { return 0; }
  virtual IdLists ids(const Features& features) const;
};

// The feature `key` (for column `column`), or a ValueError naming it and
// the keys there are.
const Tensor& feature_for(const Features& features, const std::string& key,
                          const std::string& column);
// The examples in a batch of features (dim 0 of the first).
std::int64_t batch_size_of(const Features& features);
// Ids as float32 [batch, num_buckets]: per example the count of each id
// ("sum"), divided by the id count ("mean") or its square root ("sqrtn").
Tensor combine_ids(const IdLists& ids, std::int64_t num_buckets, const std::string& combiner);
// Columns sorted by name, as TensorFlow orders them; duplicate names are a
// ValueError.
std::vector<FeatureColumn> sorted_by_name(std::vector<FeatureColumn> columns,
                                          const std::string& where);

}  // namespace lockstep::feature_column
