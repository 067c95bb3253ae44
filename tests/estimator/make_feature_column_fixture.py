"""Writes feature_columns.json: what TensorFlow's own feature columns
(tf.feature_column, feature_column_v2) make of one small batch, for
tests/estimator/estimator_test.cc (FeatureColumns.*).

For every column: its TensorFlow name and its dense value per example (a
categorical column through indicator_column, so its ids are the positions of
the ones). Embedding columns use a constant-per-row table (row i holds
i + 0.5 in every dimension), written here, so the combiners are checked
without random numbers.

Run by hand with TensorFlow installed, never by the build:
    python3 make_feature_column_fixture.py > feature_columns.json
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fcv2

fc = tf.feature_column

features = {
    "price": tf.constant([[1.0], [2.0], [6.5], [-3.0]]),
    "pair": tf.constant([[0.5, 7.0], [3.0, 3.0], [9.0, -1.0], [2.0, 2.0]]),
    "word": tf.constant([["apple"], ["kiwi"], [""], ["zebra"]]),
    "words": tf.constant([["a", "b"], ["c", ""], ["a", "a"], ["", ""]]),
    "id": tf.constant([[1], [3], [-1], [0]], tf.int64),
    "ids": tf.constant([[1, 2], [0, 0], [3, -1], [-1, -1]], tf.int64),
    "year": tf.constant([[1999], [2024], [7], [2024]], tf.int64),
}
as_lists = {
    k: (np.char.decode(v.numpy().astype(bytes), "utf-8").tolist() if v.dtype == tf.string
        else v.numpy().tolist()) for k, v in features.items()}
kinds = {k: ("string" if v.dtype == tf.string else "int" if v.dtype.is_integer else "float")
         for k, v in features.items()}

ind = fc.indicator_column
price = fc.numeric_column("price")
columns = {
    "numeric": fc.numeric_column("pair", shape=(2,)),
    "numeric_normalized": fc.numeric_column("price", normalizer_fn=lambda x: (x - 1.0) / 2.0),
    "bucketized": fc.bucketized_column(price, [0.0, 2.0, 6.0]),
    "bucketized_pair": fc.bucketized_column(fc.numeric_column("pair", shape=(2,)), [1.0, 5.0]),
    "identity": ind(fc.categorical_column_with_identity("id", 4)),
    "identity_multi": ind(fc.categorical_column_with_identity("ids", 4)),
    "vocab": ind(fc.categorical_column_with_vocabulary_list("word", ["kiwi", "apple", "fig"])),
    "vocab_oov": ind(fc.categorical_column_with_vocabulary_list(
        "word", ["kiwi", "apple"], num_oov_buckets=3)),
    "vocab_int": ind(fc.categorical_column_with_vocabulary_list("year", [2024, 1999])),
    "hash": ind(fc.categorical_column_with_hash_bucket("words", 10)),
    "hash_int": ind(fc.categorical_column_with_hash_bucket("year", 7, dtype=tf.int64)),
    "cross_raw": ind(fc.crossed_column(["word", "year"], 13)),
    "cross_columns": ind(fc.crossed_column(
        [fc.bucketized_column(price, [0.0, 2.0, 6.0]),
         fc.categorical_column_with_identity("ids", 4)], 17)),
    "cross_mixed": ind(fc.crossed_column(
        ["words", fc.categorical_column_with_identity("id", 4)], 11, hash_key=42)),
}
for combiner in ["mean", "sum", "sqrtn"]:
    columns["embedding_" + combiner] = fc.embedding_column(
        fc.categorical_column_with_identity("ids", 4), 3, combiner=combiner,
        initializer=lambda shape, dtype=None, partition_info=None: tf.constant(
            np.repeat(np.arange(shape[0], dtype=np.float32)[:, None] + 0.5, shape[1], axis=1)))


class Variables(fcv2.StateManager):
    """Makes the embedding tables from each column's initializer."""

    def __init__(self):
        self.made = {}
        self.resources = {}

    def has_resource(self, feature_column, name):
        return (id(feature_column), name) in self.resources

    def add_resource(self, feature_column, name, resource):
        self.resources[(id(feature_column), name)] = resource

    def get_resource(self, feature_column, name):
        return self.resources[(id(feature_column), name)]

    def create_variable(self, feature_column, name, shape, dtype=None, trainable=True,
                        use_resource=True, initializer=None):
        v = tf.Variable(initializer(shape), name=name)
        self.made[(id(feature_column), name)] = v
        return v

    def get_variable(self, feature_column, name):
        return self.made[(id(feature_column), name)]


state = Variables()
out = {"generator": f"tensorflow {tf.__version__} tf.feature_column",
       "features": as_lists, "kinds": kinds, "columns": {}}
for label, column in columns.items():
    column.create_state(state)
    cache = fcv2.FeatureTransformationCache(features)
    value = column.get_dense_tensor(cache, state).numpy()
    out["columns"][label] = {"name": column.name,
                             "value": value.reshape(value.shape[0], -1).tolist()}
print(json.dumps(out, indent=1))
