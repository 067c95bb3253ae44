// The seed models, defined once: what the `lockstep` command trains, the
// benchmarks time and the tests check. Uncompiled, built with the layers'
// default names (dense, dense_1, ...), as the guide builds them. The
// examples define their own, line for line as the guide's code does.
#pragma once

#include "lockstep/train/model.h"

namespace lockstep::zoo {

// The guide's MLP: 784 → Dense(256, relu) → Dense(256, relu) → Dense(10)
// (logits); 269,322 parameters.
Model seed_mlp();

// The small CNN: 28×28×1 → Conv2D(32, 3×3, relu) → MaxPooling2D →
// Conv2D(64, 3×3, relu) → MaxPooling2D → Flatten → Dense(128, relu) →
// Dense(10) (logits).
Model small_cnn();

}  // namespace lockstep::zoo
