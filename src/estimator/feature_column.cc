// Feature columns (tf.feature_column, feature_column_v2.py's semantics):
// each column's transform of a batch of features, and the two layers over
// columns, DenseFeatures and LinearModel.
#include "lockstep/estimator/feature_column.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "estimator/columns.h"
#include "estimator/fingerprint.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/error.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::feature_column {

namespace est = lockstep::estimator;

// ---- Shared helpers ----------------------------------------------------------

Variable ColumnVariables::get(const std::string& name, const Shape& shape,
                              const Initializer& initializer, bool trainable) {
  std::lock_guard lk(mu_);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  Tensor initial;
  {
    NoGradGuard no_grad;
    initial = initializer(shape);
  }
  Variable v = create_variable(initial, {.name = prefix_ + "/" + name, .trainable = trainable});
  by_name_.emplace(name, v);
  ordered_.push_back(v);
  return v;
}

std::vector<Variable> ColumnVariables::all() const {
  std::lock_guard lk(mu_);
  return ordered_;
}

Tensor ColumnImpl::dense(const Features&, ColumnVariables&) const {
  detail::throw_error<ValueError>("feature column '", name(),
                                  "' is categorical, not dense. Hint: wrap it in "
                                  "indicator_column or embedding_column");
}

IdLists ColumnImpl::ids(const Features&) const {
  detail::throw_error<ValueError>("feature column '", name(),
                                  "' is dense, not categorical (it gives no bucket ids)");
}

const Tensor& feature_for(const Features& features, const std::string& key,
                          const std::string& column) {
  auto it = features.find(key);
  if (it != features.end()) return it->second;
  std::string keys;
  for (const auto& [k, v] : features) keys += (keys.empty() ? "'" : ", '") + k + "'";
  detail::throw_error<ValueError>("feature column '", column, "': the features have no key '", key,
                                  "' (they have ", keys.empty() ? "none" : keys,
                                  "). Hint: input_fn's dataset must yield it by that name");
}

std::int64_t batch_size_of(const Features& features) {
  LOCKSTEP_CHECK(!features.empty(), "feature columns: the features are empty");
  const Tensor& t = features.begin()->second;
  LOCKSTEP_CHECK_AS(ShapeError, t.rank() >= 1, "feature '", features.begin()->first,
                    "' is a scalar; features are batches (dimension 0: the examples)");
  return t.dim(0);
}

Tensor combine_ids(const IdLists& ids, std::int64_t num_buckets, const std::string& combiner) {
  Tensor out = Tensor::zeros({ids.batch, num_buckets});
  float* p = out.data<float>();
  for (std::int64_t b = 0; b < ids.batch; ++b) {
    const auto& row = ids.ids[static_cast<std::size_t>(b)];
    if (row.empty()) continue;
    float scale = 1.0f;
    if (combiner == "mean") scale = 1.0f / static_cast<float>(row.size());
    if (combiner == "sqrtn") scale = 1.0f / std::sqrt(static_cast<float>(row.size()));
    for (std::int64_t id : row) p[b * num_buckets + id] += scale;
  }
  return out;
}

std::vector<FeatureColumn> sorted_by_name(std::vector<FeatureColumn> columns,
                                          const std::string& where) {
  LOCKSTEP_CHECK(!columns.empty(), where, ": feature_columns must not be empty");
  std::set<std::string> seen;
  for (const FeatureColumn& c : columns) {
    LOCKSTEP_CHECK(c.defined(), where, ": a feature column is undefined");
    LOCKSTEP_CHECK(seen.insert(c.name()).second, where, ": two feature columns are named '",
                   c.name(), "' (TensorFlow: duplicate feature column name); keep one");
  }
  std::sort(columns.begin(), columns.end(),
            [](const FeatureColumn& a, const FeatureColumn& b) { return a.name() < b.name(); });
  return columns;
}

namespace {

void check_combiner(const std::string& combiner, const std::string& where) {
  LOCKSTEP_CHECK(combiner == "sum" || combiner == "mean" || combiner == "sqrtn", where,
                 ": combiner must be 'sum', 'mean' or 'sqrtn', got '", combiner, "'");
}

// The values of an integer feature per example ([batch] or [batch, k]).
std::vector<std::vector<std::int64_t>> integer_values(const Tensor& t, const std::string& key,
                                                      const std::string& column) {
  LOCKSTEP_CHECK(t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64, "feature column '",
                 column, "': feature '", key, "' must hold integers (int32 or int64), got ",
                 t.dtype(), " ", t.shape());
  LOCKSTEP_CHECK_AS(ShapeError, t.rank() == 1 || t.rank() == 2, "feature column '", column,
                    "': feature '", key, "' must be [batch] or [batch, k], got ", t.shape());
  const std::int64_t batch = t.dim(0), k = t.rank() == 2 ? t.dim(1) : 1;
  const std::vector<std::int64_t> all = t.to_vector<std::int64_t>();
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b)
    out[static_cast<std::size_t>(b)].assign(all.begin() + b * k, all.begin() + (b + 1) * k);
  return out;
}

// The strings of a string feature per example (uint8 [batch, width] or
// [batch, k, width]).
std::vector<std::vector<std::string>> string_values(const Tensor& t, const std::string& key,
                                                    const std::string& column) {
  LOCKSTEP_CHECK(t.dtype() == DType::kUInt8 && (t.rank() == 2 || t.rank() == 3), "feature column '",
                 column, "': feature '", key,
                 "' must hold strings, as uint8 [batch, width] or [batch, k, width] "
                 "(estimator::string_feature), got ",
                 t.dtype(), " ", t.shape());
  const std::int64_t batch = t.dim(0), k = t.rank() == 3 ? t.dim(1) : 1;
  const std::vector<std::string> all = est::strings_of(t);
  std::vector<std::vector<std::string>> out(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b)
    out[static_cast<std::size_t>(b)].assign(all.begin() + b * k, all.begin() + (b + 1) * k);
  return out;
}

bool holds_strings(const Tensor& t) { return t.dtype() == DType::kUInt8; }

// The values of a string or integer feature per example as text (integers
// in decimal, as TensorFlow's as_string; -1 as "": no value).
std::vector<std::vector<std::string>> keys_of(const Tensor& t, bool strings,
                                              const std::string& key) {
  if (strings) return string_values(t, key, key);
  std::vector<std::vector<std::string>> keys;
  for (const auto& row : integer_values(t, key, key)) {
    std::vector<std::string> r;
    for (std::int64_t v : row) r.push_back(v == -1 ? std::string() : std::to_string(v));
    keys.push_back(std::move(r));
  }
  return keys;
}

// ---- numeric_column ------------------------------------------------------------

class NumericImpl : public ColumnImpl {
 public:
  NumericImpl(std::string key, NumericColumnOptions o) : key_(std::move(key)), o_(std::move(o)) {
    LOCKSTEP_CHECK(!key_.empty(), "numeric_column: the key is empty");
    width_ = 1;
    for (std::int64_t d : o_.shape) {
      LOCKSTEP_CHECK(d > 0, "numeric_column '", key_, "': shape dimensions must be positive, got ",
                     Shape(o_.shape));
      width_ *= d;
    }
    if (o_.default_value)
      LOCKSTEP_CHECK(static_cast<std::int64_t>(o_.default_value->size()) == width_,
                     "numeric_column '", key_, "': default_value has ", o_.default_value->size(),
                     " values; the shape ", Shape(o_.shape), " holds ", width_);
  }
  std::string name() const override { return key_; }
  bool is_dense() const override { return true; }
  std::int64_t width() const override { return width_; }
  const std::vector<std::int64_t>& shape() const { return o_.shape; }
  const std::string& key() const { return key_; }

  // The batch as float32 [batch, width].
  Tensor values(const Features& features) const {
    auto it = features.find(key_);
    if (it == features.end() && o_.default_value) {
      const std::int64_t batch = batch_size_of(features);
      std::vector<float> v;
      for (std::int64_t b = 0; b < batch; ++b)
        v.insert(v.end(), o_.default_value->begin(), o_.default_value->end());
      return Tensor::from_vector<float>(v, {batch, width_});
    }
    Tensor x = feature_for(features, key_, key_);
    LOCKSTEP_CHECK(x.dtype() != DType::kBool, "numeric_column '", key_,
                   "': the feature holds bools; expected numbers");
    if (o_.normalizer_fn) x = o_.normalizer_fn(x);
    if (x.dtype() != DType::kFloat32) x = cast(x, DType::kFloat32);
    LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 1 && x.numel() == x.dim(0) * width_,
                      "numeric_column '", key_, "': expected ", width_,
                      " values per example (shape ", Shape(o_.shape), "), got a feature of shape ",
                      x.shape());
    return reshape(x, {x.dim(0), width_});
  }
  Tensor dense(const Features& features, ColumnVariables&) const override {
    return values(features);
  }

 private:
  std::string key_;
  NumericColumnOptions o_;
  std::int64_t width_ = 1;
};

// ---- bucketized_column --------------------------------------------------------------

class BucketizedImpl : public ColumnImpl {
 public:
  BucketizedImpl(std::shared_ptr<const NumericImpl> source, std::vector<float> boundaries)
      : source_(std::move(source)), boundaries_(std::move(boundaries)) {
    LOCKSTEP_CHECK(!boundaries_.empty(), "bucketized_column '", name(),
                   "': boundaries must not be empty");
    for (std::size_t i = 1; i < boundaries_.size(); ++i)
      LOCKSTEP_CHECK(boundaries_[i - 1] < boundaries_[i], "bucketized_column '", name(),
                     "': boundaries must be sorted and distinct, got ", boundaries_[i - 1],
                     " before ", boundaries_[i]);
  }
  std::string name() const override { return source_->name() + "_bucketized"; }
  bool is_dense() const override { return true; }
  bool is_categorical() const override { return true; }
  std::int64_t buckets_per_value() const {
    return static_cast<std::int64_t>(boundaries_.size()) + 1;
  }
  std::int64_t width() const override { return source_->width() * buckets_per_value(); }
  std::int64_t num_buckets() const override { return width(); }

  // Per example, element i's bucket offset by i · (len(boundaries) + 1).
  IdLists ids(const Features& features) const override {
    const Tensor x = source_->values(features);
    const std::int64_t batch = x.dim(0), n = x.dim(1);
    const float* p = x.data<float>();
    IdLists out{.batch = batch,
                .ids = std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(batch))};
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = p[b * n + i];
        const auto bucket = static_cast<std::int64_t>(
            std::upper_bound(boundaries_.begin(), boundaries_.end(), v) - boundaries_.begin());
        out.ids[static_cast<std::size_t>(b)].push_back(bucket + i * buckets_per_value());
      }
    }
    return out;
  }
  // One-hot per element, elements side by side.
  Tensor dense(const Features& features, ColumnVariables&) const override {
    return combine_ids(ids(features), num_buckets(), "sum");
  }

 private:
  std::shared_ptr<const NumericImpl> source_;
  std::vector<float> boundaries_;
};

// ---- categorical columns ------------------------------------------------------------

class IdentityImpl : public ColumnImpl {
 public:
  IdentityImpl(std::string key, std::int64_t num_buckets, std::optional<std::int64_t> default_value)
      : key_(std::move(key)), num_buckets_(num_buckets), default_(default_value) {
    LOCKSTEP_CHECK(num_buckets_ >= 1, "categorical_column_with_identity '", key_,
                   "': num_buckets must be >= 1, got ", num_buckets_);
    if (default_)
      LOCKSTEP_CHECK(*default_ >= 0 && *default_ < num_buckets_,
                     "categorical_column_with_identity '", key_, "': default_value ", *default_,
                     " is not in [0, ", num_buckets_, ")");
  }
  std::string name() const override { return key_; }
  bool is_categorical() const override { return true; }
  std::int64_t num_buckets() const override { return num_buckets_; }
  IdLists ids(const Features& features) const override {
    auto values = integer_values(feature_for(features, key_, key_), key_, key_);
    IdLists out{.batch = static_cast<std::int64_t>(values.size()), .ids = {}};
    for (auto& row : values) {
      std::vector<std::int64_t> kept;
      for (std::int64_t v : row) {
        if (v == -1) continue;  // TensorFlow's "no value" for integers
        if (v < 0 || v >= num_buckets_) {
          LOCKSTEP_CHECK(default_.has_value(), "categorical_column_with_identity '", key_, "': id ",
                         v, " is not in [0, ", num_buckets_,
                         "). Hint: give a default_value for such ids");
          v = *default_;
        }
        kept.push_back(v);
      }
      out.ids.push_back(std::move(kept));
    }
    return out;
  }

 private:
  std::string key_;
  std::int64_t num_buckets_;
  std::optional<std::int64_t> default_;
};

class VocabularyImpl : public ColumnImpl {
 public:
  VocabularyImpl(std::string key, std::vector<std::string> strings,
                 std::vector<std::int64_t> integers, bool string_keys, VocabularyListOptions o)
      : key_(std::move(key)), string_keys_(string_keys), o_(o) {
    const std::size_t n = string_keys ? strings.size() : integers.size();
    LOCKSTEP_CHECK(n > 0, "categorical_column_with_vocabulary_list '", key_,
                   "': the vocabulary list is empty");
    LOCKSTEP_CHECK(o_.num_oov_buckets >= 0, "categorical_column_with_vocabulary_list '", key_,
                   "': num_oov_buckets must be >= 0, got ", o_.num_oov_buckets);
    LOCKSTEP_CHECK(o_.num_oov_buckets == 0 || o_.default_value == -1,
                   "categorical_column_with_vocabulary_list '", key_,
                   "': set default_value or num_oov_buckets, not both");
    size_ = static_cast<std::int64_t>(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string k = string_keys ? strings[i] : std::to_string(integers[i]);
      LOCKSTEP_CHECK(index_.emplace(k, static_cast<std::int64_t>(i)).second,
                     "categorical_column_with_vocabulary_list '", key_, "': '", k,
                     "' is in the vocabulary list twice");
    }
    LOCKSTEP_CHECK(o_.default_value >= -1 && o_.default_value < size_ + o_.num_oov_buckets,
                   "categorical_column_with_vocabulary_list '", key_, "': default_value ",
                   o_.default_value, " is not an id of this column");
  }
  std::string name() const override { return key_; }
  bool is_categorical() const override { return true; }
  std::int64_t num_buckets() const override { return size_ + o_.num_oov_buckets; }
  IdLists ids(const Features& features) const override {
    const auto keys = keys_of(feature_for(features, key_, key_), string_keys_, key_);
    IdLists out{.batch = static_cast<std::int64_t>(keys.size()), .ids = {}};
    for (const auto& row : keys) {
      std::vector<std::int64_t> kept;
      for (const std::string& k : row) {
        if (k.empty()) continue;  // "" (or -1): no value
        auto it = index_.find(k);
        std::int64_t id = o_.default_value;
        if (it != index_.end()) {
          id = it->second;
        } else if (o_.num_oov_buckets > 0) {
          id = size_ + static_cast<std::int64_t>(estimator::detail::fingerprint64(k) %
                                                 static_cast<std::uint64_t>(o_.num_oov_buckets));
        }
        if (id >= 0) kept.push_back(id);
      }
      out.ids.push_back(std::move(kept));
    }
    return out;
  }

 private:
  std::string key_;
  bool string_keys_;
  VocabularyListOptions o_;
  std::int64_t size_ = 0;
  std::map<std::string, std::int64_t> index_;
};

// The raw values of a feature per example, as sparse_cross hashes its
// dense inputs: strings by Fingerprint64, integers as they are, every
// value kept ("" and -1 too: only categorical columns drop them).
std::vector<std::vector<std::uint64_t>> hashed_values(const Tensor& t, const std::string& key,
                                                      const std::string& column) {
  std::vector<std::vector<std::uint64_t>> out;
  if (holds_strings(t)) {
    for (const auto& row : string_values(t, key, column)) {
      std::vector<std::uint64_t> r;
      for (const std::string& s : row) r.push_back(estimator::detail::fingerprint64(s));
      out.push_back(std::move(r));
    }
  } else {
    for (const auto& row : integer_values(t, key, column)) {
      std::vector<std::uint64_t> r(row.begin(), row.end());
      out.push_back(std::move(r));
    }
  }
  return out;
}

class HashBucketImpl : public ColumnImpl {
 public:
  HashBucketImpl(std::string key, std::int64_t size, KeyType dtype)
      : key_(std::move(key)), size_(size), dtype_(dtype) {
    LOCKSTEP_CHECK(size_ > 1, "categorical_column_with_hash_bucket '", key_,
                   "': hash_bucket_size must be > 1, got ", size_);
  }
  std::string name() const override { return key_; }
  bool is_categorical() const override { return true; }
  std::int64_t num_buckets() const override { return size_; }
  IdLists ids(const Features& features) const override {
    const auto keys = keys_of(feature_for(features, key_, key_), dtype_ == KeyType::kString, key_);
    IdLists out{.batch = static_cast<std::int64_t>(keys.size()), .ids = {}};
    for (const auto& row : keys) {
      std::vector<std::int64_t> kept;
      for (const std::string& k : row) {
        if (k.empty()) continue;
        kept.push_back(static_cast<std::int64_t>(estimator::detail::fingerprint64(k) %
                                                 static_cast<std::uint64_t>(size_)));
      }
      out.ids.push_back(std::move(kept));
    }
    return out;
  }

 private:
  std::string key_;
  std::int64_t size_;
  KeyType dtype_;
};

class CrossedImpl : public ColumnImpl {
 public:
  CrossedImpl(std::vector<CrossKey> keys, std::int64_t size, std::uint64_t hash_key)
      : size_(size), hash_key_(hash_key) {
    LOCKSTEP_CHECK(keys.size() >= 2, "crossed_column: expected at least 2 keys, got ", keys.size());
    LOCKSTEP_CHECK(size_ >= 1, "crossed_column: hash_bucket_size must be >= 1, got ", size_);
    // Nested crosses contribute their own keys (TensorFlow's leaf keys).
    for (CrossKey& k : keys) {
      if (k.column().defined()) {
        if (auto nested = std::dynamic_pointer_cast<const CrossedImpl>(k.column().impl())) {
          leaves_.insert(leaves_.end(), nested->leaves_.begin(), nested->leaves_.end());
          continue;
        }
      } else {
        LOCKSTEP_CHECK(!k.key().empty(), "crossed_column: a key is empty");
      }
      leaves_.push_back(std::move(k));
    }
    std::vector<std::string> names;
    for (const CrossKey& k : leaves_)
      names.push_back(k.column().defined() ? k.column().name() : k.key());
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) name_ += (name_.empty() ? "" : "_X_") + n;
  }
  std::string name() const override { return name_; }
  bool is_categorical() const override { return true; }
  std::int64_t num_buckets() const override { return size_; }
  IdLists ids(const Features& features) const override {
    // sparse_cross takes its sparse inputs (the categorical columns' ids)
    // before its dense ones (raw features), each group in the keys' order.
    std::vector<std::vector<std::vector<std::uint64_t>>> inputs;
    for (int dense = 0; dense < 2; ++dense) {
      for (const CrossKey& k : leaves_) {
        if (k.column().defined() == (dense == 1)) continue;
        if (k.column().defined()) {
          std::vector<std::vector<std::uint64_t>> values;
          for (const auto& row : k.column().impl()->ids(features).ids)
            values.emplace_back(row.begin(), row.end());
          inputs.push_back(std::move(values));
        } else {
          inputs.push_back(hashed_values(feature_for(features, k.key(), name_), k.key(), name_));
        }
      }
    }
    const std::size_t batch = inputs.front().size();
    for (const auto& in : inputs)
      LOCKSTEP_CHECK_AS(ShapeError, in.size() == batch, "crossed_column '", name_,
                        "': its inputs have ", batch, " and ", in.size(), " examples");
    IdLists out{.batch = static_cast<std::int64_t>(batch),
                .ids = std::vector<std::vector<std::int64_t>>(batch)};
    for (std::size_t b = 0; b < batch; ++b) {
      bool any_empty = false;
      for (const auto& in : inputs) any_empty = any_empty || in[b].empty();
      if (any_empty) continue;
      // Every combination, the last input's index turning fastest.
      std::vector<std::size_t> at(inputs.size(), 0);
      for (;;) {
        std::uint64_t hashed = hash_key_;
        for (std::size_t i = 0; i < inputs.size(); ++i)
          hashed = estimator::detail::fingerprint_cat64(hashed, inputs[i][b][at[i]]);
        out.ids[b].push_back(static_cast<std::int64_t>(hashed % static_cast<std::uint64_t>(size_)));
        bool done = true;
        for (std::size_t i = inputs.size(); i-- > 0;) {
          if (++at[i] < inputs[i][b].size()) {
            done = false;
            break;
          }
          at[i] = 0;
        }
        if (done) break;
      }
    }
    return out;
  }

 private:
  std::vector<CrossKey> leaves_;
  std::int64_t size_;
  std::uint64_t hash_key_;
  std::string name_;
};

// ---- indicator_column and embedding_column ------------------------------------------------

class IndicatorImpl : public ColumnImpl {
 public:
  explicit IndicatorImpl(CategoricalColumn c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name() + "_indicator"; }
  bool is_dense() const override { return true; }
  std::int64_t width() const override { return c_.num_buckets(); }
  Tensor dense(const Features& features, ColumnVariables&) const override {
    return combine_ids(c_.impl()->ids(features), c_.num_buckets(), "sum");
  }

 private:
  CategoricalColumn c_;
};

class EmbeddingImpl : public ColumnImpl {
 public:
  EmbeddingImpl(CategoricalColumn c, std::int64_t dimension, EmbeddingColumnOptions o)
      : c_(std::move(c)), dimension_(dimension), o_(std::move(o)) {
    LOCKSTEP_CHECK(dimension_ >= 1, "embedding_column '", name(), "': dimension must be >= 1, got ",
                   dimension_);
    check_combiner(o_.combiner, "embedding_column '" + name() + "'");
  }
  std::string name() const override { return c_.name() + "_embedding"; }
  bool is_dense() const override { return true; }
  std::int64_t width() const override { return dimension_; }
  // The combined rows as (ids combined as weights) · table: one matmul, so
  // the table's gradient is what the lookup's would be.
  Tensor dense(const Features& features, ColumnVariables& variables) const override {
    const Initializer init =
        o_.initializer
            ? *o_.initializer
            : initializers::TruncatedNormal(0.0f, 1.0f / std::sqrt(static_cast<float>(dimension_)));
    Variable table = variables.get(name() + "/embedding_weights", {c_.num_buckets(), dimension_},
                                   init, o_.trainable);
    return matmul(combine_ids(c_.impl()->ids(features), c_.num_buckets(), o_.combiner),
                  table.value());
  }

 private:
  CategoricalColumn c_;
  std::int64_t dimension_;
  EmbeddingColumnOptions o_;
};

}  // namespace

// ---- The public functions ---------------------------------------------------------------------

std::string FeatureColumn::name() const {
  LOCKSTEP_CHECK(impl_ != nullptr, "feature column: undefined");
  return impl_->name();
}

std::int64_t CategoricalColumn::num_buckets() const { return impl()->num_buckets(); }

NumericColumn numeric_column(const std::string& key, NumericColumnOptions options) {
  return NumericColumn(std::make_shared<NumericImpl>(key, std::move(options)));
}

BucketizedColumn bucketized_column(const NumericColumn& source_column,
                                   std::vector<float> boundaries) {
  auto source = std::dynamic_pointer_cast<const NumericImpl>(source_column.impl());
  LOCKSTEP_CHECK(source != nullptr, "bucketized_column: the source must be a numeric_column");
  return BucketizedColumn(std::make_shared<BucketizedImpl>(source, std::move(boundaries)));
}

CategoricalColumn categorical_column_with_identity(const std::string& key, std::int64_t num_buckets,
                                                   std::optional<std::int64_t> default_value) {
  return CategoricalColumn(std::make_shared<IdentityImpl>(key, num_buckets, default_value));
}

CategoricalColumn categorical_column_with_vocabulary_list(const std::string& key,
                                                          std::vector<std::string> vocabulary_list,
                                                          VocabularyListOptions options) {
  return CategoricalColumn(std::make_shared<VocabularyImpl>(key, std::move(vocabulary_list),
                                                            std::vector<std::int64_t>{},
                                                            /*string_keys=*/true, options));
}

CategoricalColumn categorical_column_with_vocabulary_list(const std::string& key,
                                                          std::vector<std::int64_t> vocabulary_list,
                                                          VocabularyListOptions options) {
  return CategoricalColumn(std::make_shared<VocabularyImpl>(
      key, std::vector<std::string>{}, std::move(vocabulary_list), /*string_keys=*/false, options));
}

CategoricalColumn categorical_column_with_hash_bucket(const std::string& key,
                                                      std::int64_t hash_bucket_size,
                                                      KeyType dtype) {
  return CategoricalColumn(std::make_shared<HashBucketImpl>(key, hash_bucket_size, dtype));
}

FeatureColumn indicator_column(const CategoricalColumn& categorical_column) {
  LOCKSTEP_CHECK(categorical_column.defined(), "indicator_column: the column is undefined");
  return FeatureColumn(std::make_shared<IndicatorImpl>(categorical_column));
}

FeatureColumn embedding_column(const CategoricalColumn& categorical_column, std::int64_t dimension,
                               EmbeddingColumnOptions options) {
  LOCKSTEP_CHECK(categorical_column.defined(), "embedding_column: the column is undefined");
  return FeatureColumn(
      std::make_shared<EmbeddingImpl>(categorical_column, dimension, std::move(options)));
}

CategoricalColumn crossed_column(std::vector<CrossKey> keys, std::int64_t hash_bucket_size,
                                 std::optional<std::uint64_t> hash_key) {
  // sparse_ops.py's _DEFAULT_HASH_KEY.
  constexpr std::uint64_t kDefaultHashKey = 0xDECAFCAFFEULL;
  return CategoricalColumn(std::make_shared<CrossedImpl>(std::move(keys), hash_bucket_size,
                                                         hash_key.value_or(kDefaultHashKey)));
}

// ---- DenseFeatures ------------------------------------------------------------------------------

struct DenseFeatures::State {
  State(std::vector<FeatureColumn> c, std::string prefix)
      : columns(std::move(c)), variables(std::move(prefix)) {}
  std::vector<FeatureColumn> columns;
  ColumnVariables variables;
};

DenseFeatures::DenseFeatures(std::vector<FeatureColumn> feature_columns,
                             DenseFeaturesOptions options) {
  auto columns = sorted_by_name(std::move(feature_columns), "DenseFeatures");
  for (const FeatureColumn& c : columns)
    LOCKSTEP_CHECK(c.impl()->is_dense(),
                   "DenseFeatures: items of feature_columns must be dense "
                   "columns; '",
                   c.name(),
                   "' is categorical. Hint: wrap it in "
                   "indicator_column or embedding_column");
  state_ = std::make_shared<State>(std::move(columns), options.name);
}

Tensor DenseFeatures::operator()(const Features& features) const {
  std::vector<Tensor> parts;
  for (const FeatureColumn& c : state_->columns)
    parts.push_back(c.impl()->dense(features, state_->variables));
  const std::int64_t batch = parts.front().dim(0);
  for (std::size_t i = 0; i < parts.size(); ++i)
    LOCKSTEP_CHECK_AS(ShapeError, parts[i].dim(0) == batch, "DenseFeatures: feature column '",
                      state_->columns[i].name(), "' gives ", parts[i].dim(0), " examples, '",
                      state_->columns[0].name(), "' ", batch);
  return parts.size() == 1 ? parts.front() : concat(parts, 1);
}

std::vector<Variable> DenseFeatures::variables() const { return state_->variables.all(); }

// ---- LinearModel --------------------------------------------------------------------------------

struct LinearModel::State {
  State(std::vector<FeatureColumn> c, LinearModelOptions o)
      : columns(std::move(c)), options(std::move(o)), variables(options.name) {}
  std::vector<FeatureColumn> columns;
  LinearModelOptions options;
  ColumnVariables variables;
};

LinearModel::LinearModel(std::vector<FeatureColumn> feature_columns, LinearModelOptions options) {
  LOCKSTEP_CHECK(options.units >= 1, "LinearModel: units must be >= 1, got ", options.units);
  check_combiner(options.sparse_combiner, "LinearModel");
  auto columns = sorted_by_name(std::move(feature_columns), "LinearModel");
  state_ = std::make_shared<State>(std::move(columns), std::move(options));
}

Tensor LinearModel::operator()(const Features& features) const {
  State& s = *state_;
  const std::int64_t units = s.options.units;
  Tensor logits;
  for (const FeatureColumn& c : s.columns) {
    const ColumnImpl& impl = *c.impl();
    // Categorical columns (bucketized ones too) weigh their ids, combined;
    // dense ones their values.
    const Tensor values =
        impl.is_categorical()
            ? combine_ids(impl.ids(features), impl.num_buckets(), s.options.sparse_combiner)
            : impl.dense(features, s.variables);
    Variable w =
        s.variables.get(c.name() + "/weights", {values.dim(1), units}, initializers::Zeros(), true);
    const Tensor term = matmul(values, w.value());
    logits = logits.defined() ? add(logits, term) : term;
  }
  Variable bias = s.variables.get("bias_weights", {units}, initializers::Zeros(), true);
  return add(logits, bias.value());
}

std::vector<Variable> LinearModel::variables() const { return state_->variables.all(); }

}  // namespace lockstep::feature_column
