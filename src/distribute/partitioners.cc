// The three partitioners of tf.distribute.experimental.partitioners, with
// TensorFlow's arithmetic (sharded_variable.py and partitioned_variables.py:
// min_max_variable_partitioner, variable_axis_size_partitioner), and the
// "div" split of rows between shards.
#include "lockstep/distribute/partitioners.h"

#include <algorithm>
#include <cmath>

#include "lockstep/core/error.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {
namespace {

// [n, 1, 1, ...] for a shape of rank >= 1; a scalar is never split.
std::vector<std::int64_t> first_axis(const Shape& shape, std::int64_t n) {
  if (shape.rank() == 0) return {};
  std::vector<std::int64_t> out(static_cast<std::size_t>(shape.rank()), 1);
  out[0] = n;
  return out;
}

}  // namespace

FixedShardsPartitioner::FixedShardsPartitioner(int num_shards) : num_shards_(num_shards) {
  LOCKSTEP_CHECK(num_shards >= 1, "FixedShardsPartitioner: num_shards must be >= 1, got ",
                 num_shards);
}

std::vector<std::int64_t> FixedShardsPartitioner::operator()(const Shape& shape, DType) const {
  if (shape.rank() == 0) return {};
  return first_axis(shape, std::min<std::int64_t>(num_shards_, shape[0]));
}

MinSizePartitioner::MinSizePartitioner(MinSizePartitionerOptions o) : o_(o) {
  LOCKSTEP_CHECK(o.min_shard_bytes >= 1,
                 "MinSizePartitioner: min_shard_bytes must be positive, got ", o.min_shard_bytes);
  LOCKSTEP_CHECK(o.max_shards >= 1, "MinSizePartitioner: max_shards must be positive, got ",
                 o.max_shards);
  LOCKSTEP_CHECK(o.bytes_per_string >= 1,
                 "MinSizePartitioner: bytes_per_string must be positive, got ", o.bytes_per_string);
}

std::vector<std::int64_t> MinSizePartitioner::operator()(const Shape& shape, DType dtype) const {
  if (shape.rank() == 0) return {};
  const double total = static_cast<double>(shape.numel()) * static_cast<double>(dtype_size(dtype));
  const auto wanted = static_cast<std::int64_t>(std::ceil(total / o_.min_shard_bytes));
  return first_axis(
      shape, std::max<std::int64_t>(1, std::min({shape[0], std::int64_t{o_.max_shards}, wanted})));
}

MaxSizePartitioner::MaxSizePartitioner(MaxSizePartitionerOptions o) : o_(o) {
  LOCKSTEP_CHECK(o.max_shard_bytes >= 1,
                 "MaxSizePartitioner: max_shard_bytes must be positive, got ", o.max_shard_bytes);
  LOCKSTEP_CHECK(!o.max_shards || *o.max_shards >= 1,
                 "MaxSizePartitioner: max_shards must be positive, got ", o.max_shards.value_or(0));
  LOCKSTEP_CHECK(o.bytes_per_string >= 1,
                 "MaxSizePartitioner: bytes_per_string must be positive, got ", o.bytes_per_string);
}

std::vector<std::int64_t> MaxSizePartitioner::operator()(const Shape& shape, DType dtype) const {
  if (shape.rank() == 0) return {};
  if (shape[0] == 0) return first_axis(shape, 1);
  const double row_bytes = static_cast<double>(shape.numel() / shape[0]) *
                           static_cast<double>(dtype_size(dtype));
  const double rows_per_shard =
      std::max(1.0, std::floor(static_cast<double>(o_.max_shard_bytes) / row_bytes));
  auto shards = static_cast<std::int64_t>(std::ceil(static_cast<double>(shape[0]) / rows_per_shard));
  if (o_.max_shards) shards = std::min<std::int64_t>(shards, *o_.max_shards);
  return first_axis(shape, shards);
}

std::vector<std::int64_t> shard_rows(std::int64_t rows, std::int64_t num_shards) {
  LOCKSTEP_CHECK(rows >= 1 && num_shards >= 1, "shard_rows: cannot split ", rows, " rows into ",
                 num_shards, " shards");
  return even_split(rows, static_cast<int>(std::min(rows, num_shards)));
}

}  // namespace lockstep::distribute
