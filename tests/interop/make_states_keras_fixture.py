"""Writes keras_fixtures/states.keras and states_expected.json: the layers
whose call returns several tensors, as Keras users take them apart:
`seq, h, c = LSTM(return_state=True)(x)`, a GRU's and a SimpleRNN's state,
a Bidirectional LSTM's four states, MultiHeadAttention and Attention with
return_attention_scores (the scores read by later layers), an LSTM and a GRU
starting from other layers' states (initial_state), under an Embedding's
padding mask; trained 3 steps and saved, with a fixed input,
Keras's outputs, one more step on a fixed batch and the outputs after it.
Read by tests/train/keras_files_test.cc
(KerasFiles.LayersWithSeveralOutputsPredictAndStepAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_states_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step
from make_masking_keras_fixture import classify_tokens


def main(out):
    keras.utils.set_random_seed(101)
    rng = np.random.default_rng(101)
    tokens = keras.Input(shape=(6,), dtype="int32")
    x = layers.Embedding(80, 6, mask_zero=True)(tokens)
    seq, h, c = layers.LSTM(4, return_sequences=True, return_state=True)(x)
    last, g = layers.GRU(3, return_state=True)(seq)
    _, r = layers.SimpleRNN(2, return_state=True, go_backwards=True)(seq)
    b, fh, fc, bh, bc = layers.Bidirectional(layers.LSTM(2, return_state=True))(seq)
    q = layers.Rescaling(1.0)(seq)
    a, scores = layers.MultiHeadAttention(num_heads=2, key_dim=2)(
        q, q, return_attention_scores=True)
    d, weights = layers.Attention(use_scale=True)([a, a], return_attention_scores=True)
    # A decoder starting from its encoder's states (initial_state).
    decoded = layers.LSTM(4, return_sequences=True)(x, initial_state=[h, c])
    regru = layers.GRU(3)(seq, initial_state=g)
    features = layers.Concatenate()([
        h, c, last, g, r, b, fh, fc, bh, bc,
        layers.GlobalAveragePooling1D()(d), layers.GlobalAveragePooling1D()(decoded), regru,
        layers.Flatten()(scores), layers.Flatten()(weights)])
    classify_tokens(out, rng, "states", tokens, features, 80)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
