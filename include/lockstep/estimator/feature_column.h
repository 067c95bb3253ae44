// Feature columns (tf.feature_column): how the named features an input_fn
// yields become a model's numbers. Part of the Estimator compatibility layer.
//
//   namespace fc = ls::feature_column;
//   auto price = fc::bucketized_column(fc::numeric_column("price"), {2.0f, 6.0f});
//   auto word = fc::categorical_column_with_hash_bucket("word", 100);
//   fc::DenseFeatures input_layer({price, fc::embedding_column(word, 8)});
//   Tensor x = input_layer(features);     // [batch, 3 + 8], columns sorted by name
//
// Dense columns (numeric, bucketized, indicator, embedding) give float32
// values per example; categorical ones (identity, vocabulary list, hash
// bucket, crossed, bucketized) give bucket ids, which a linear model weighs
// and which indicator_column / embedding_column make dense. Inputs are
// [batch] or [batch, k] tensors; strings come as uint8 [batch(, k), width],
// NUL-padded (estimator::string_feature). As in TensorFlow, -1 among
// integer ids and "" among strings mean "no value" to a categorical column
// and are dropped (a feature crossed by its key keeps them), and
// TensorFlow's string hash (Fingerprint64, FarmHash's) is used, so hash
// buckets and crosses give TensorFlow's ids.
//
// Columns are immutable values (handles to shared, constant state).
// DenseFeatures and LinearModel are handles to layers that own variables;
// copies share them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/estimator/features.h"
#include "lockstep/nn/initializers.h"

namespace lockstep::feature_column {

using estimator::Features;

class ColumnImpl;  // the columns' internals (src/estimator/columns.h)

class FeatureColumn {
 public:
  FeatureColumn() = default;
  explicit FeatureColumn(std::shared_ptr<const ColumnImpl> impl) : impl_(std::move(impl)) {}
  // TensorFlow's name: the key, or "<source>_bucketized", "<column>_indicator",
  // "<column>_embedding", "<a>_X_<b>".
  std::string name() const;
  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<const ColumnImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const ColumnImpl> impl_;
};

// A column of bucket ids.
class CategoricalColumn : public FeatureColumn {
 public:
  using FeatureColumn::FeatureColumn;
  std::int64_t num_buckets() const;
};
class NumericColumn : public FeatureColumn {
 public:
  using FeatureColumn::FeatureColumn;
};
// Both: one-hot values as a dense column, bucket ids as a categorical one.
class BucketizedColumn : public CategoricalColumn {
 public:
  using CategoricalColumn::CategoricalColumn;
};

struct NumericColumnOptions {
  // Per example (the batch dimension comes first in the input).
  std::vector<std::int64_t> shape{1};
  // Used, per example, when the features lack the key (TensorFlow uses it
  // when parsing examples that lack it); none: a missing key is an error.
  std::optional<std::vector<float>> default_value{};
  // Applied to the input before it is cast to float32 (TensorFlow's order).
  std::function<Tensor(const Tensor&)> normalizer_fn{};
};
NumericColumn numeric_column(const std::string& key, NumericColumnOptions options = {});

// Bucket i holds boundaries[i-1] <= x < boundaries[i]: len(boundaries) + 1
// buckets per element of the source (boundaries strictly increasing).
BucketizedColumn bucketized_column(const NumericColumn& source_column,
                                   std::vector<float> boundaries);

// Integer ids in [0, num_buckets); others become default_value, or are an
// error without one.
CategoricalColumn categorical_column_with_identity(
    const std::string& key, std::int64_t num_buckets,
    std::optional<std::int64_t> default_value = std::nullopt);

struct VocabularyListOptions {
  // The id of a value outside the list when num_oov_buckets is 0 (-1: none).
  std::int64_t default_value = -1;
  // > 0: a value outside the list gets vocabulary size +
  // Fingerprint64(value) % num_oov_buckets.
  std::int64_t num_oov_buckets = 0;
};
// The index of the value in the list (strings, or integers).
CategoricalColumn categorical_column_with_vocabulary_list(const std::string& key,
                                                          std::vector<std::string> vocabulary_list,
                                                          VocabularyListOptions options = {});
CategoricalColumn categorical_column_with_vocabulary_list(const std::string& key,
                                                          std::vector<std::int64_t> vocabulary_list,
                                                          VocabularyListOptions options = {});

// What a hashed column's input holds: strings (tf.string), or integers,
// which are hashed as their decimal text (as TensorFlow's as_string).
enum class KeyType { kString, kInteger };
// Fingerprint64(value) % hash_bucket_size.
CategoricalColumn categorical_column_with_hash_bucket(const std::string& key,
                                                      std::int64_t hash_bucket_size,
                                                      KeyType dtype = KeyType::kString);

// Multi-hot: the count of each id per example (num_buckets values).
FeatureColumn indicator_column(const CategoricalColumn& categorical_column);

struct EmbeddingColumnOptions {
  // How an example's several ids combine: "mean", "sqrtn" or "sum".
  std::string combiner = "mean";
  // None: truncated normal, mean 0, stddev 1/sqrt(dimension) (TensorFlow's).
  std::optional<Initializer> initializer{};
  bool trainable = true;
};
// A trainable [num_buckets, dimension] table; an example's value combines
// the rows of its ids (zeros when it has none).
FeatureColumn embedding_column(const CategoricalColumn& categorical_column, std::int64_t dimension,
                               EmbeddingColumnOptions options = {});

// A key of crossed_column: a feature's name or a categorical column.
class CrossKey {
 public:
  CrossKey(const char* key) : key_(key) {}             // NOLINT(google-explicit-constructor)
  CrossKey(std::string key) : key_(std::move(key)) {}  // NOLINT(google-explicit-constructor)
  CrossKey(CategoricalColumn column)                   // NOLINT(google-explicit-constructor)
      : column_(std::move(column)) {}
  const std::string& key() const { return key_; }
  const CategoricalColumn& column() const { return column_; }

 private:
  std::string key_;
  CategoricalColumn column_;
};
// Every combination of the keys' values per example, hashed as TensorFlow's
// sparse_cross_hashed (FingerprintCat64 from hash_key) % hash_bucket_size.
CategoricalColumn crossed_column(std::vector<CrossKey> keys, std::int64_t hash_bucket_size,
                                 std::optional<std::uint64_t> hash_key = std::nullopt);

// ---- Layers over columns ----

struct DenseFeaturesOptions {
  // Prefix of the variables' names (embedding tables).
  std::string name = "dense_features";
};
// tf.keras.layers.DenseFeatures: the dense columns' values side by side,
// columns sorted by name, as float32 [batch, total width]. A categorical
// column is a ValueError (wrap it in indicator_column or embedding_column).
// Embedding tables are made, through create_variable, on the first call.
class DenseFeatures {
 public:
  explicit DenseFeatures(std::vector<FeatureColumn> feature_columns,
                         DenseFeaturesOptions options = {});
  Tensor operator()(const Features& features) const;
  std::vector<Variable> variables() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

struct LinearModelOptions {
  std::int64_t units = 1;
  // How a categorical column's several ids per example combine: "sum",
  // "mean" or "sqrtn".
  std::string sparse_combiner = "sum";
  std::string name = "linear_model";
};
// Estimator's LinearModel: Σ_columns value·weights + bias_weights, each
// column with its own [width or num_buckets, units] weights (zeros at
// first, named "<name>/<column>/weights"), columns sorted by name.
class LinearModel {
 public:
  explicit LinearModel(std::vector<FeatureColumn> feature_columns, LinearModelOptions options = {});
  Tensor operator()(const Features& features) const;
  std::vector<Variable> variables() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace lockstep::feature_column
