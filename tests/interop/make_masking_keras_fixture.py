"""Writes keras_fixtures/masked_*.keras and their _expected.json: Keras's
masks as users meet them, each model trained 3 steps and saved, with a
fixed input, Keras's outputs, one more step on a fixed batch and the
outputs after it. Read by tests/train/keras_files_test.cc
(KerasFiles.MaskedModelsPredictAndStepAsKeras).

- masked_recurrent: Embedding(mask_zero=True) over padded token sequences
  (padding at the end, and some inside), then LSTM, TimeDistributed Dense,
  GRU without reset_after, Bidirectional LSTM (which sets
  zero_output_for_mask), GlobalAveragePooling1D over the real steps, a
  SimpleRNN going backwards and a GRU's last output.
- masked_attention: Embedding(mask_zero=True), MultiHeadAttention
  self-attention under the padding mask, Add and LayerNormalization, a
  causal MultiHeadAttention (use_causal_mask=True), Attention with a scale,
  additive Attention, GlobalAveragePooling1D. Each MultiHeadAttention is
  called on a copy (Rescaling(1.0)) of the tensor the residual Add
  reads, for the reason the comment there gives.
- masked_floats: Masking(mask_value=0) over float sequences whose padded
  steps are all zeros, then an LSTM and a Dense.

The step's batch uses each token id other than the padding 0 at most once,
for the reason make_sequence_keras_fixture.py gives; padded steps send no
gradient to row 0.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_masking_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step


def padded(rng, n, steps, vocab, first_distinct=0):
    """Token ids in [1, vocab) with zeros as padding: each row's length
    drawn, the rest 0, and one row with a zero inside. The first
    `first_distinct` rows use each id at most once."""
    x = rng.integers(1, vocab, size=(n, steps)).astype("int32")
    if first_distinct:
        x[:first_distinct] = (rng.permutation(vocab - 1)[:first_distinct * steps] + 1).reshape(
            first_distinct, steps)
    for i in range(n):
        length = int(rng.integers(2, steps + 1))
        x[i, length:] = 0
    x[1, 1] = 0  # a masked step inside a sequence
    return x


def classify_tokens(out, rng, name, tokens, features, vocab):
    """A 3-class head on `features`, compiled with Adam, trained and saved
    on padded sequences of `vocab` ids (fixture_steps.fit_save_and_step)."""
    model = keras.Model(tokens, layers.Dense(3)(features))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = tokens.shape[1]
    x_train = padded(rng, 24, steps, vocab, first_distinct=8)
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = padded(rng, 4, steps, vocab)
    fit_save_and_step(model, out, name, x_train, y_train, x)


def recurrent(out, rng):
    tokens = keras.Input(shape=(7,), dtype="int32")
    x = layers.Embedding(120, 6, mask_zero=True)(tokens)
    x = layers.LSTM(5, return_sequences=True)(x)
    x = layers.TimeDistributed(layers.Dense(4, activation="tanh"))(x)
    x = layers.GRU(4, reset_after=False, return_sequences=True)(x)
    b = layers.Bidirectional(layers.LSTM(3, return_sequences=True))(x)
    c = layers.GlobalAveragePooling1D()(b)
    d = layers.SimpleRNN(3, go_backwards=True)(x)
    e = layers.GRU(2)(b)
    x = layers.Concatenate()([c, d, e])
    classify_tokens(out, rng, "masked_recurrent", tokens, x, 120)


def attention(out, rng):
    tokens = keras.Input(shape=(6,), dtype="int32")
    x = layers.Embedding(90, 8, mask_zero=True)(tokens)
    # Each MultiHeadAttention reads a copy of x: Keras's removes the masks
    # of the tensors it is called on when the model runs, so the residual
    # Add would otherwise lose the padding mask in Keras (docs/models.md,
    # "Masks").
    q = layers.Rescaling(1.0)(x)
    a = layers.MultiHeadAttention(num_heads=2, key_dim=4)(q, q)
    x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, a]))
    q = layers.Rescaling(1.0)(x)
    c = layers.MultiHeadAttention(num_heads=2, key_dim=3)(q, q, use_causal_mask=True)
    x = layers.Add()([x, layers.Dense(8)(c)])
    s = layers.Attention(use_scale=True)([x, x])
    t = layers.Attention(score_mode="concat")([x, x, layers.Dense(8)(x)])
    x = layers.Concatenate()([layers.GlobalAveragePooling1D()(s),
                              layers.GlobalAveragePooling1D()(t)])
    classify_tokens(out, rng, "masked_attention", tokens, x, 90)


def floats(out, rng):
    inputs = keras.Input(shape=(5, 3))
    x = layers.Masking(mask_value=0.0)(inputs)
    x = layers.LSTM(4)(x)
    model = keras.Model(inputs, layers.Dense(2)(x))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def data(n):
        x = rng.normal(size=(n, 5, 3)).astype("float32")
        for i in range(n):
            x[i, int(rng.integers(2, 6)):] = 0.0
        x[0, 1] = 0.0
        return x
    x_train = data(24)
    y_train = rng.integers(0, 2, size=(24,)).astype("int64")
    fit_save_and_step(model, out, "masked_floats", x_train, y_train, data(4))


def main(out):
    keras.utils.set_random_seed(97)
    rng = np.random.default_rng(97)
    recurrent(out, rng)
    attention(out, rng)
    floats(out, rng)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
