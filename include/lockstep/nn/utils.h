// keras.utils helpers that a port reaches for.
//
//   auto y = ls::utils::to_categorical(labels, 10);   // [n] uint8 -> [n, 10] float32
#pragma once

#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::utils {

// Integer class labels as one-hot float32 rows: keras.utils.to_categorical.
// Labels of shape [n] (or [n, 1], as Keras squeezes a trailing 1) and type
// int32, int64, uint8 or integral float32 give [n, num_classes]; any other
// shape gets the classes as a new last axis. num_classes 0: the largest
// label + 1. A label outside [0, num_classes) is an IndexError naming its
// position, a fractional or negative float label a ValueError.
Tensor to_categorical(const Tensor& labels, std::int64_t num_classes = 0);

}  // namespace lockstep::utils
