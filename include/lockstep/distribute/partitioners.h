// Variable partitioners of ParameterServerStrategy
// (tf.distribute.experimental.partitioners): how many shards a variable is
// split into along its first axis, so that a large variable spreads over
// several parameter servers.
//
//   ls::distribute::ParameterServerStrategy strategy(
//       {.variable_partitioner = ls::distribute::FixedShardsPartitioner(2)});
//
// A partitioner returns one count per axis, as TensorFlow's: the first is
// the number of shards, every other is 1 (only the first axis splits). The
// rows are then dealt as TensorFlow deals them: rows / n to each shard and
// one more to each of the first rows % n (13 rows over 5 shards: 3, 3, 3,
// 2, 2; shard_rows()).
//
// Copyable values; a partitioner is a pure function of shape and dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/shape.h"

namespace lockstep::distribute {

// What ParameterServerStrategyOptions::variable_partitioner takes: any
// callable of this signature (the classes below are ones).
using VariablePartitioner =
    std::function<std::vector<std::int64_t>(const Shape& shape, DType dtype)>;

// A fixed number of shards, at most one per row.
class FixedShardsPartitioner {
 public:
  explicit FixedShardsPartitioner(int num_shards);
  std::vector<std::int64_t> operator()(const Shape& shape, DType dtype) const;

 private:
  int num_shards_;
};

struct MinSizePartitionerOptions {
  std::int64_t min_shard_bytes = 256 << 10;  // TensorFlow's default, 256 KiB
  int max_shards = 1;
  std::int64_t bytes_per_string = 16;  // accepted for parity; Lockstep has no string tensors
};

// As many shards as keep each at least min_shard_bytes, at most max_shards.
class MinSizePartitioner {
 public:
  explicit MinSizePartitioner(MinSizePartitionerOptions options = {});
  std::vector<std::int64_t> operator()(const Shape& shape, DType dtype) const;

 private:
  MinSizePartitionerOptions o_;
};

struct MaxSizePartitionerOptions {
  std::int64_t max_shard_bytes = 0;  // required, > 0
  // nullopt: no limit (TensorFlow's None).
  std::optional<int> max_shards{};
  std::int64_t bytes_per_string = 16;
};

// As few shards as keep each at most max_shard_bytes (a row is never split:
// a row above it is a shard of its own), at most max_shards.
class MaxSizePartitioner {
 public:
  explicit MaxSizePartitioner(MaxSizePartitionerOptions options);
  std::vector<std::int64_t> operator()(const Shape& shape, DType dtype) const;

 private:
  MaxSizePartitionerOptions o_;
};

// The rows of each of `num_shards` shards of a first axis of `rows` (the
// number of shards is first capped at `rows`): TensorFlow's "div" split.
std::vector<std::int64_t> shard_rows(std::int64_t rows, std::int64_t num_shards);

}  // namespace lockstep::distribute
